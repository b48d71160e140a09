"""A member session's reads of its inbox, acknowledged only once its model has been given them.

`team_read_messages` takes the member's new messages from the bus. Until the session's next model
call carries the tool result (or the attempt ends with an outcome), they stay owed to the task:
if the attempt is lost right after reading (claim reclaimed, task released, worker killed), the
task's next attempt reads them again instead of finding them only in the short dispatch history.
"""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.shared.bus import MessageBus, UnreadPage
from teamctl.shared.tracing import NO_SPAN, Span
from teamctl.worker.runs.claims import Claim


@dataclass
class Mailbox:
    """One session's reads, as `member_id` on `claim`'s task."""

    bus: MessageBus
    member_id: str
    claim: Claim
    unacknowledged: bool = False
    trace: Span = NO_SPAN
    """The session's span, linked to each message's sender's."""

    def read(self, max_chars: int) -> UnreadPage:
        """New messages (and any an earlier attempt of the task read and lost), each once, as
        many as fit `max_chars` characters as views (at least one); the page says how many
        stay unread for the next read."""
        page = self.bus.read_unread_within(
            self.member_id, self.claim.task_id, self.claim.token, max_chars
        )
        self.unacknowledged = self.unacknowledged or bool(page.messages)
        for message in page.messages:
            self.trace.link(
                message.traceparent,
                {"teamctl.message_id": message.id, "teamctl.from": message.from_},
            )
        return page

    def acknowledge(self) -> bool:
        """The next model call carries what was read: never deliver it again. False if the claim
        was lost meanwhile (the read stays owed to the task's next attempt)."""
        if not self.unacknowledged:
            return True
        self.unacknowledged = False
        return self.bus.acknowledge_reads(self.claim.task_id, self.claim.token, [self.member_id])

    def settle(self) -> None:
        """The task ends with an outcome: no read of it is owed to any member any more."""
        self.unacknowledged = False
        self.bus.acknowledge_reads(
            self.claim.task_id, self.claim.token, self.bus.member_ids, ended=True
        )
