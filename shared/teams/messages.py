"""A persistent team's messages: sends and broadcasts that wake their recipients, inbox reads
that leave mail unread, and the team's event stream."""

from __future__ import annotations

from teamctl.shared.bus import LEAD, entries_after, envelope_from_lua
from teamctl.shared.envelopes import Envelope, SystemType
from teamctl.shared.ids import BROADCAST
from teamctl.shared.redis.connection import block_ms
from teamctl.shared.teams.team_base import TeamBase
from teamctl.shared.teams.teammates import (
    TeamEvent,
)

PEEK_BATCH = 1000
"""Unread messages shown or injected at once (the rest come with the next model call)."""
PEEK_PAGE = 32
"""Message bodies one team_peek script copies (each up to max_message_bytes)."""


class TeamMessages:
    """The store's messaging part, on the records every part shares (`store`)."""

    def __init__(self, store: TeamBase) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.keys
        self.scripts = store.scripts

    def send(
        self,
        sender: str,
        to: str,
        content: str,
        type_: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[Envelope, bool]:
        """A message from `sender` (a teammate or `lead`) to a teammate or `lead`, published and
        its recipient woken; returns the message and whether a turn was enqueued. A protocol
        type is refused (ConfigError listing the valid types): only its tools send it.
        `traceparent`: the sender's span, which the recipient's turn links to."""
        if to != LEAD:
            self.store.get(to)  # an unknown teammate is a ConfigError naming the team's teammates
        elif sender != LEAD:
            self.store.lead_inbox.make_room(sender)  # LeadMailboxFull: a tool error for the sender
        message = self.store.bus.send(sender, to, type_, None, content, traceparent)
        assert message is not None  # a team bus is always on
        self.store.lead_inbox.keep_bounds()
        return message, (to != LEAD and self.wake(to))

    def broadcast(
        self, sender: str, content: str, traceparent: str | None = None
    ) -> tuple[Envelope, list[str]]:
        """A message to every teammate but the sender (and to the lead, from a teammate);
        returns it and the teammates it woke."""
        if sender != LEAD:
            self.store.lead_inbox.make_room(sender)
        message = self.store.bus.send(sender, BROADCAST, None, None, content, traceparent)
        assert message is not None
        self.store.lead_inbox.keep_bounds()
        if self.store.budget_exceeded():  # asked once, not once per teammate
            return message, []
        return message, [
            name for name in self.store.names() if name != sender and self._wake_within_budget(name)
        ]

    def wake(self, name: str) -> bool:
        """Flip an idle teammate to working and enqueue its turn; False when it needs none, or
        the team's budget is spent (the mail waits unread)."""
        return not self.store.budget_exceeded() and self._wake_within_budget(name)

    def _wake_within_budget(self, name: str) -> bool:
        """wake() once the caller knows the budget lasts."""
        queue = self.scripts["team_wake"](
            keys=[self.keys.teammate(name), self.keys.events], args=[name]
        )
        if not queue:
            return False
        self.store.scheduler.enqueue(name, str(queue))  # the script named it: no read of the record
        return True

    def peek(
        self, member: str, limit: int = PEEK_BATCH, *, seen: bool = False
    ) -> tuple[str, list[Envelope]]:
        """The member's first `limit` unread messages, left unread; with the last inbox id they
        cover. Read PEEK_PAGE at a time (a script copies at most that many bodies). `seen`:
        they go to a model, so the lead's are never folded from now on."""
        if member != LEAD:
            self.store.get(member)
        record = [self.keys.lead_inbox] if seen and member == LEAD else []
        last_id, messages = "", []
        while limit > 0:
            page = min(limit, PEEK_PAGE)
            page_last, entries = self.scripts["team_peek"](
                keys=[self.keys.inbox(member), self.keys.read_offsets, self.keys.bus, *record],
                args=[member, page, last_id],
            )
            if not page_last:
                break
            last_id = page_last
            messages += [envelope_from_lua(entry) for entry in entries]
            limit -= page
        return last_id, messages

    def unread_count(self, member: str) -> int:
        """How many messages wait unread in the member's inbox (ids only: no body is read)."""
        after = self.conn.hget(self.keys.read_offsets, member) or "0-0"
        return entries_after(self.conn, self.keys.inbox(member), after)

    def kept(self, member: str) -> list[Envelope]:
        """Every message still in the member's inbox, read or not, in order (for export)."""
        if member != LEAD:
            self.store.get(member)
        ids = {entry_id for entry_id, _ in self.conn.xrange(self.keys.inbox(member))}
        return [m for m in self.store.bus.messages() if m.id in ids]

    def events(
        self, after_id: str = "0-0", *, wait_ms: int | None = None, count: int = PEEK_BATCH
    ) -> list[TeamEvent]:
        """Task, teammate and request changes after `after_id`, in order; waits up to `wait_ms`
        for the first (None: do not wait), so watchers block instead of polling."""
        streams = {self.keys.events: after_id}
        reply = (
            self.conn.xread(streams, count=count)
            if wait_ms is None
            else self.store.bus.blocking_conn.xread(streams, count=count, block=block_ms(wait_ms))
        )
        entries = reply[0][1] if reply else []
        return [
            TeamEvent.model_validate({"id": entry_id, **fields}) for entry_id, fields in entries
        ]

    def notices(self, type_: SystemType) -> list[Envelope]:
        """Every message of that system type still on the bus (tests and the lead's views)."""
        return [m for m in self.store.bus.messages() if m.type == type_]
