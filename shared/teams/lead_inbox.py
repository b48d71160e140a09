"""A team lead's inbox kept within lead_inbox_max_messages, and the team's bus within
bus_max_messages, whether or not a lead (`teamctl lead`) reads.

Past the bound, the oldest unread notices (system types: teammate.idle, task.result, ...) fold
into one `inbox.summary` notice (lead_inbox_fold.lua): counts by type, the teammates and tasks
named. Peer and protocol messages never fold: they count toward the bound, and a teammate's
message to a lead whose unread mail is all such messages is refused (LeadMailboxFull, a tool
error for the teammate's model; checked just before the message is published, so teammates
writing at once may pass the bound by one message each); protocol messages are bounded by their
requests instead. Nothing a lead's model was shown (its peeks raise `seen`) is folded. Then
the bus is cut back: trim_bus.lua from its oldest end, team_bus_compact.lua past an old message
the lead has not read.

The upkeep runs after each TeamStore step that may add to the bus or mail the lead (a turn's
end, a reconcile, a send, a protocol message), not inside the scripts that publish: they belong
to other steps, and one call after them counts only the mail added since the last one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from teamctl.shared.bus import LEAD, TRIM_SLACK_DIVISOR, MessageBus
from teamctl.shared.envelopes import SYSTEM_NAMESPACES, SystemType
from teamctl.shared.errors import InfraError, TeamError
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.teams.options import TeamOptions

log = logging.getLogger(__name__)

FOLD_WALK = 64
"""Inbox entries one fold call counts, and walks looking for notices (kept messages are walked
once)."""
FOLD_BATCH = 32
"""Notices one fold call folds; a longer backlog takes more calls, each a short script."""
SUMMARY_NAMES = 20
"""Teammates and tasks a summary names ('and N more' for the rest)."""
COMPACT_WORK = 96
"""Bus entries one compaction call walks plus the inbox entries it deletes."""
MAX_ROUNDS = 200
"""Script calls one upkeep makes at most, so a writer never loops on a bus that keeps growing."""


class LeadMailboxFull(TeamError):
    """A teammate's message to a lead whose unread mail is at its bound and cannot fold."""


@dataclass(frozen=True)
class FoldOutcome:
    """What one upkeep found: the lead's unread messages, notices folded, the bus's length."""

    unread: int
    folded: int
    bus_length: int


@dataclass(frozen=True)
class LeadInbox:
    """The retention of one team's lead inbox and bus (TeamStore.lead_inbox builds it)."""

    keys: TeamKeys
    options: TeamOptions
    bus: MessageBus
    scripts: Scripts | GuardedScripts

    def fold(self, room: int = 0) -> FoldOutcome:
        """Fold the lead's oldest unread notices while its unread mail is past the bound (or,
        with `room` 1, at it: a message is about to join)."""
        keys = self.keys
        most = self.options.lead_inbox_max_messages
        target = most - max(1, most // 10)  # a tenth of room, so folds are rare and batched
        folded = 0
        for _ in range(MAX_ROUNDS):
            unread, count, length, more = self.scripts["lead_inbox_fold"](
                keys=[keys.bus, keys.bus_seq, keys.inbox(LEAD), keys.read_offsets, keys.lead_inbox],
                args=[
                    most,
                    target,
                    FOLD_WALK,
                    FOLD_BATCH,
                    SystemType.INBOX_SUMMARY,
                    SUMMARY_NAMES,
                    room,
                    *SYSTEM_NAMESPACES,
                ],
            )
            folded += int(count)
            if not int(more):
                break
        return FoldOutcome(int(unread), folded, int(length))

    def keep_bounds(self) -> FoldOutcome | None:
        """Fold, then cut the bus back to bus_max_messages once it is a tenth past it; None
        (logged) when the roster kept changing under the cut: the step that called it is done,
        and the next upkeep catches up."""
        try:
            return self._keep_bounds()
        except InfraError as exc:
            log.warning("team %s: the bus was not cut back this time: %s", self.keys.team, exc)
            return None

    def _keep_bounds(self) -> FoldOutcome:
        outcome = self.fold()
        cap = self.options.bus_max_messages
        if outcome.bus_length > cap + cap // TRIM_SLACK_DIVISOR:
            self.bus.trim()
            length = self.bus.compact(
                record_key=self.keys.lead_inbox, work=COMPACT_WORK, rounds=MAX_ROUNDS
            )
            outcome = FoldOutcome(outcome.unread, outcome.folded, length)
        return outcome

    def make_room(self, sender: str) -> None:
        """Fold for a teammate's message to the lead; LeadMailboxFull when the lead's unread
        mail stays at its bound (peer and protocol messages only, which never fold)."""
        outcome = self.fold(room=1)
        most = self.options.lead_inbox_max_messages
        if outcome.unread >= most:
            raise LeadMailboxFull(
                f"the lead has {outcome.unread} unread messages, its bound "
                f"(lead_inbox_max_messages {most}), and none of them can be folded; {sender}'s "
                "message was not sent. Wait for the lead to read its mail, or put what you "
                "wanted to say in a task result or a message to a teammate"
            )
