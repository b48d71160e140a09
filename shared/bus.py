"""The message bus: one stream per key space (a run's), with per-member inboxes fanned out on write.

Keys (all from the space's KeySpace):
- ``bus``: every message in order, as flat fields (from, to, type, task_id, content, created_at),
  readable with ``redis-cli XRANGE``; the entry id is the message id.
- ``inbox:<member>``: one entry per message delivered to the member, with the message's own id
  and its bus position (``seq``). Fan-out on write keeps ``read_unread`` proportional to the
  member's new messages (one XRANGE after its offset, one id lookup per message), never a scan of
  the stream.
- ``offsets``: member id -> id of the last message it has read, advanced by the script that reads.
- ``unacked``: what a task's attempt has read but not yet given its model. A member session reads
  as its attempt (task id and claim token) and acknowledges once its next model call carries the
  messages, or its attempt ends with an outcome; an attempt lost before that (claim reclaimed,
  task released, worker killed) leaves the record, and the task's next attempt gets those
  messages again, first. So a read lost with its attempt is not lost for the member. A bounded
  read (``read_unread_within``: team_read_messages answers within tool_result_max_chars) takes
  only what fits, new messages and a record's alike; the record counts what it gave.
- ``bus_seq``: how many messages were ever published, so trimming knows positions.
- ``roster``, ``roster_ver``: the members, read from Redis with their version (shared/roster.py)
  and cached by it; publish and trim_bus refuse a stale version and the bus reads it again.

Delivery: a message to a member goes to its inbox; to ``*`` or to nobody, to every member except
the sender (a member never receives its own messages, broadcasts included, so neither
``read_unread`` nor ``history_for`` returns them; AI4J's history kept own broadcasts, teamctl's
skips the sender); to ``lead`` to no inbox (the lead reads the whole bus), except in a key space
whose lead has an inbox (a persistent team, ``KeySpace.lead_has_inbox``): there mail to ``lead``
and a teammate's broadcast land in ``inbox:lead``.

Growth: past ``bus_maxlen`` plus a tenth, the bus is cut back to ``bus_maxlen`` messages, except
that no message some member has not read (or not acknowledged) is ever dropped; inbox entries go
with their message. Trimming goes by the roster in Redis, so every bus of a space protects the
same inboxes. On a team's bus, an old message the lead has not read would stop that cut (it
only takes the oldest end), so `compact` deletes the read messages after it instead
(shared/teams/lead_inbox.py keeps the lead's unread mail itself bounded).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import redis
from teamctl.shared.envelopes import (
    ENVELOPES,
    SYSTEM_NAMESPACES,
    Envelope,
    PeerType,
    ProtocolType,
    SystemType,
)
from teamctl.shared.errors import ConfigError, InfraError
from teamctl.shared.ids import BROADCAST, RESERVED_MEMBER_IDS, check_task_id
from teamctl.shared.keys import KeySpace
from teamctl.shared.redis.connection import block_ms as capped_ms
from teamctl.shared.redis.connection import blocking_client
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.roster import Roster, read_roster
from teamctl.shared.text import quoted

T = TypeVar("T")

BUS_MAXLEN = 100_000
"""Messages kept on a run's bus before trimming (unread messages are always kept)."""
TRIM_SLACK_DIVISOR = 10
"""Trim only once the bus exceeds its cap by a tenth, so trimming costs O(1) per message."""
READ_BATCH = 1000
COUNT_PAGE = 1000
"""Inbox entries read per call while counting what is left unread."""
PAGE_MAX_CHARS = 50_000
"""The most a bounded read carries, whatever the cap asks: its script scans no more text than
that (a few milliseconds), and a model is not handed more mail at once anyway."""
MAX_TYPE_CHARS = 64
ROSTER_TRIES = 5
"""Roster reads per publish or trim: each retry follows a change made since the last read."""

_TYPE = re.compile(rf"[A-Za-z][A-Za-z0-9_.-]{{0,{MAX_TYPE_CHARS - 1}}}")  # used with fullmatch
_MEMBER_ID = re.compile(r"[a-z0-9_-]{1,128}")
LEAD = "lead"
SYSTEM = "system"
"""The sender of the runtime's own messages."""


def delivered_to(message: Envelope, member_id: str) -> bool:
    """Whether the message lands in the member's inbox (the rule publish fans out by)."""
    if message.from_ == member_id:
        return False
    return message.to in (None, "", BROADCAST, member_id)


@dataclass(frozen=True)
class UnreadPage:
    """A bounded read of a member's inbox: the messages taken, and how many stay unread."""

    messages: list[Envelope]
    remaining: int


class MessageBus:
    """Publishing and reading the messages of one key space, for the members on its roster."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: KeySpace,
        *,
        enabled: bool = True,
        max_message_bytes: int = 65536,
        bus_maxlen: int = BUS_MAXLEN,
        scripts: Scripts | GuardedScripts | None = None,
    ) -> None:
        if bus_maxlen < 1:
            raise ConfigError(f"bus_maxlen is {bus_maxlen}; keep at least 1 message")
        self.conn = conn
        self.keys = keys
        self.enabled = enabled
        self.max_message_bytes = max_message_bytes
        self.bus_maxlen = bus_maxlen
        self.scripts = scripts or Scripts(conn)
        self._roster: Roster | None = None

    def roster(self) -> Roster:
        """The roster as this bus last read it (from Redis, on first use)."""
        if self._roster is None:
            self._roster = read_roster(self.conn, self.keys)
        return self._roster

    def refresh_roster(self) -> Roster:
        """Read the roster from Redis again (its version moved, or a member may have joined)."""
        self._roster = read_roster(self.conn, self.keys)
        return self._roster

    @property
    def member_ids(self) -> list[str]:
        """The members on the roster, in roster order."""
        return list(self.roster().member_ids)

    def _roster_with(self, member_id: str) -> Roster:
        """The cached roster, read again when it lacks `member_id` (it may have joined since)."""
        roster = self.roster()
        return roster if member_id in roster.member_ids else self.refresh_roster()

    def _on_current_roster(self, step: Callable[[Roster], T | None]) -> T:
        """Run a script step that depends on the roster; it returns None when its script found
        the cached roster stale, and then runs again on the roster read anew."""
        for _ in range(ROSTER_TRIES):
            result = step(self.roster())
            if result is not None:
                return result
            self.refresh_roster()
        raise InfraError(
            f"the roster of {self.keys.label} changed {ROSTER_TRIES} times in a "
            "row while the bus was publishing or trimming by it; try again"
        )

    @cached_property
    def blocking_conn(self) -> redis.Redis:
        """Connections of their own for XREAD BLOCK, with a socket timeout that outlasts it."""
        return blocking_client(self.conn)

    def publish(
        self,
        sender: str,
        to: str | None,
        type_: SystemType | str,
        task_id: str | None,
        content: str,
    ) -> Envelope | None:
        """Append a runtime message (a SystemType; no recipient or type checks beyond shape);
        None when the bus is off. Members publish through `send` and `broadcast` only.

        Every field's shape is checked even here, so no field can carry unbounded text past the
        size limit of peer messages into the stream and every reader's view.
        """
        _check_shape(sender, to, type_, task_id, content)
        return self._append(sender, to, type_, task_id, content)

    def tell_lead(
        self, type_: SystemType | str, task_id: str | None, content: str
    ) -> Envelope | None:
        """A runtime notice to the lead (budget, plan decision, fallback, warning)."""
        return self.publish(SYSTEM, LEAD, type_, task_id, content)

    def _append(
        self,
        sender: str,
        to: str | None,
        type_: str,
        task_id: str | None,
        content: str,
        traceparent: str | None = None,
    ) -> Envelope | None:
        """Publish a message whose fields were checked; None when the bus is off."""
        if not self.enabled:
            return None

        def publish(roster: Roster) -> tuple[str, int, int] | None:
            inboxes = [
                self.keys.inbox(m)
                for m in _recipients(roster, sender, to, self.keys.lead_has_inbox)
            ]
            entry_id, length, created_at = self.scripts["publish"](
                keys=[self.keys.bus, self.keys.bus_seq, self.keys.roster_ver, *inboxes],
                args=[
                    sender,
                    to or "",
                    type_,
                    task_id or "",
                    content,
                    roster.version,
                    traceparent or "",
                ],
            )
            return (entry_id, int(length), created_at) if entry_id else None

        entry_id, length, created_at = self._on_current_roster(publish)
        # Trimming protects the roster's inboxes; a space whose roster was never written has
        # none to protect its members' unread messages by, so it is never trimmed.
        if (
            self.roster().member_ids
            and length > self.bus_maxlen + self.bus_maxlen // TRIM_SLACK_DIVISOR
        ):
            self.trim()
        return ENVELOPES.validate_python(
            {
                "id": entry_id,
                "from": sender,
                "to": to,
                "type": type_,
                "task_id": task_id,
                "content": content,
                "created_at": created_at,
                "traceparent": traceparent,
            }
        )

    def send(
        self,
        sender: str,
        to: str,
        type_: str | None,
        task_id: str | None,
        content: str,
        traceparent: str | None = None,
    ) -> Envelope | None:
        """A peer message to one member (or to everyone with '*'); ConfigError says what is wrong
        (system types included: only the runtime publishes those).

        A None type means `peer.message` (`peer.broadcast` for '*'); `traceparent` names the
        sender's span, which a receiver's links to.
        """
        if isinstance(to, str) and to.strip() == BROADCAST:
            return self.broadcast(sender, type_, task_id, content, traceparent)
        self._check_sender(sender)
        recipient = self._check_recipient(sender, to)
        type_ = _check_peer_type(PeerType.MESSAGE if type_ is None else type_)
        self._check_size(sender, recipient, type_, task_id, content)
        return self._append(sender, recipient, type_, task_id, content, traceparent)

    def broadcast(
        self,
        sender: str,
        type_: str | None,
        task_id: str | None,
        content: str,
        traceparent: str | None = None,
    ) -> Envelope | None:
        """A peer message to every other member; a None type means `peer.broadcast`."""
        self._check_sender(sender)
        type_ = _check_peer_type(PeerType.BROADCAST if type_ is None else type_)
        self._check_size(sender, BROADCAST, type_, task_id, content)
        return self._append(sender, BROADCAST, type_, task_id, content, traceparent)

    def read_unread_within(
        self, member_id: str, task_id: str, token: str, max_chars: int
    ) -> UnreadPage:
        """The member's next unread messages whose views (as team_read_messages shows them:
        sender, recipient, type, task id, content) fit `max_chars` characters as JSON (at least
        one; at most PAGE_MAX_CHARS), each once, in order, read as the task's attempt (see
        `read_unread`); the rest stay unread, and the page says how many."""
        if not self.enabled or self._inboxless(member_id):
            return UnreadPage([], 0)
        inbox = self.keys.inbox(member_id)
        _, entries, owed, offset = self.scripts["read_unread"](
            keys=[inbox, self.keys.read_offsets, self.keys.bus, self.keys.unacked_reads],
            args=[
                member_id,
                READ_BATCH,
                check_task_id(task_id),
                token,
                min(max(max_chars, 1), PAGE_MAX_CHARS),
            ],
        )
        return UnreadPage(
            [envelope_from_lua(entry) for entry in entries],
            int(owed) + entries_after(self.conn, inbox, offset or "0-0"),
        )

    def read_unread(
        self, member_id: str, task_id: str | None = None, token: str = "0"
    ) -> list[Envelope]:
        """Messages delivered to the member since its last read, each exactly once, in order.

        Read as a task's attempt (`task_id` and its claim `token`), they stay owed to that task
        until `acknowledge_reads`: a later attempt of it gets them again, before the new ones.
        """
        if not self.enabled or self._inboxless(member_id):
            return []
        messages: list[Envelope] = []
        while True:
            consumed, entries, _, _ = self.scripts["read_unread"](
                keys=[
                    self.keys.inbox(member_id),
                    self.keys.read_offsets,
                    self.keys.bus,
                    self.keys.unacked_reads,
                ],
                args=[member_id, READ_BATCH, check_task_id(task_id) if task_id else "", token, ""],
            )
            messages.extend(envelope_from_lua(entry) for entry in entries)
            if consumed < READ_BATCH:
                return messages

    def acknowledge_reads(
        self, task_id: str, token: str, member_ids: list[str], *, ended: bool = False
    ) -> bool:
        """The attempt holding `token` gave its model what it read as these members: never
        deliver that again (what a bounded read left owed stays, for its next read); `ended`:
        the task ended with an outcome, nothing stays owed. False if `token` no longer holds
        the task."""
        if not self.enabled or not member_ids:
            return True
        verdict: str = self.scripts["ack_reads"](
            keys=[self.keys.unacked_reads, self.keys.task(task_id)],
            args=[token, task_id, "1" if ended else "", *member_ids],
        )
        return verdict == "ok"

    def history_for(self, member_id: str, limit: int) -> list[Envelope]:
        """The last `limit` messages delivered to the member, read or not (all when limit <= 0)."""
        if not self.enabled or self._inboxless(member_id):
            return []
        entries = self.scripts["history"](
            keys=[self.keys.inbox(member_id), self.keys.bus], args=[max(limit, 0)]
        )
        return [envelope_from_lua(entry) for entry in entries]

    def messages(self) -> list[Envelope]:
        """Every message of the run still on the bus, in order."""
        if not self.enabled:
            return []
        return [
            envelope_from_stream(eid, fields) for eid, fields in self.conn.xrange(self.keys.bus)
        ]

    def latest(self, count: int) -> list[Envelope]:
        """The last `count` messages on the bus, in order (one bounded read, for a page)."""
        if not self.enabled:
            return []
        return [
            envelope_from_stream(eid, fields)
            for eid, fields in reversed(self.conn.xrevrange(self.keys.bus, count=count))
        ]

    def tail(self, after_id: str, block_ms: int | None) -> list[Envelope]:
        """Messages after `after_id`, waiting up to `block_ms` for one (None: no wait)."""
        streams = {self.keys.bus: after_id}
        reply = (
            self.conn.xread(streams, count=READ_BATCH)
            if block_ms is None
            else self.blocking_conn.xread(streams, count=READ_BATCH, block=capped_ms(block_ms))
        )
        return [
            envelope_from_stream(eid, fields)
            for _, entries in reply or []
            for eid, fields in entries
        ]

    def trim(self) -> int:
        """Cut the bus back to `bus_maxlen` messages, keeping every unread one; returns removed."""

        def trim(roster: Roster) -> int | None:
            # A team's lead has an inbox too: its unread mail is protected like a member's.
            readers = [*roster.member_ids, *([LEAD] if self.keys.lead_has_inbox else [])]
            removed = int(
                self.scripts["trim_bus"](
                    keys=[
                        self.keys.bus,
                        self.keys.bus_seq,
                        self.keys.read_offsets,
                        self.keys.unacked_reads,
                        self.keys.roster_ver,
                        *(self.keys.inbox(m) for m in readers),
                    ],
                    args=[self.bus_maxlen, roster.version, *readers],
                )
            )
            return removed if removed >= 0 else None

        return self._on_current_roster(trim)

    def compact(self, record_key: str, work: int, rounds: int) -> int:
        """On a bus whose lead has an inbox: delete, oldest first, the messages every reader
        that gets them has read, past an old one the lead has not (which stops `trim`), until
        `bus_maxlen` remain; `work` bus entries walked and inbox entries deleted per call (at
        least one broadcast's), at most `rounds` calls, its progress in `record_key`
        (team_bus_compact.lua). Returns the bus's length after."""

        def compact(roster: Roster) -> tuple[int, bool] | None:
            readers = [*roster.member_ids, LEAD]
            removed, length, moved = self.scripts["team_bus_compact"](
                keys=[
                    self.keys.bus,
                    self.keys.read_offsets,
                    self.keys.unacked_reads,
                    self.keys.roster_ver,
                    record_key,
                    *(self.keys.inbox(m) for m in readers),
                ],
                args=[self.bus_maxlen, roster.version, max(work, len(readers) + 1), *readers],
            )
            return (int(length), bool(int(removed) or int(moved))) if int(removed) >= 0 else None

        length = int(self.conn.xlen(self.keys.bus))
        for _ in range(rounds):
            if length <= self.bus_maxlen:
                break
            length, progressed = self._on_current_roster(compact)
            if not progressed:
                break
        return length

    def _inboxless(self, member_id: str) -> bool:
        """True for `lead`/`system` (no inbox); ConfigError for an id that is not a member."""
        if member_id == LEAD and self.keys.lead_has_inbox:
            return False
        if member_id in RESERVED_MEMBER_IDS:
            return True
        members = self._roster_with(member_id).member_ids
        if member_id not in members:
            raise ConfigError(
                f"{member_id!r} is not a member of this {self.keys.kind}; "
                f"members: {', '.join(members)}"
            )
        return False

    def _check_sender(self, sender: str) -> None:
        if sender in RESERVED_MEMBER_IDS:
            return
        members = self._roster_with(sender).member_ids
        if sender not in members:
            raise ConfigError(
                f"unknown sender {quoted(sender)}: messages come from a member of "
                f"this {self.keys.kind} ({', '.join(members)}), 'lead' or "
                "'system'"
            )

    def _check_recipient(self, sender: str, to: str) -> str:
        """The recipient's member id, or ConfigError naming who may be messaged."""
        candidate = to.strip().lower() if isinstance(to, str) else ""
        members = self._roster_with(candidate).member_ids
        allowed = f"send to one of: {', '.join(members)}, or '*' for every member"
        if not _MEMBER_ID.fullmatch(candidate):
            raise ConfigError(
                f"invalid recipient {quoted(to)}: member ids use a-z, 0-9, '_' and '-'; {allowed}"
            )
        if candidate == LEAD and self.keys.lead_has_inbox and sender != LEAD:
            return candidate
        if candidate in RESERVED_MEMBER_IDS:
            raise ConfigError(f"{candidate!r} cannot receive peer messages; {allowed}")
        if candidate not in members:
            raise ConfigError(f"unknown team member {quoted(to)}; {allowed}")
        if candidate == sender:
            raise ConfigError(f"{sender!r} cannot send a message to itself; {allowed}")
        return candidate

    def _check_size(
        self, sender: str, to: str, type_: str, task_id: str | None, content: str
    ) -> None:
        """A peer message, every field counted, within max_message_bytes (shapes checked first,
        so an oversized id is named as such)."""
        _check_shape(sender, to, type_, task_id, content)
        size = sum(
            len(field.encode("utf-8")) for field in (sender, to, type_, task_id or "", content)
        )
        if size > self.max_message_bytes:
            raise ConfigError(
                f"message is {size} bytes (content {len(content.encode('utf-8'))}, the rest "
                f"sender, recipient, type and task id); the limit is {self.max_message_bytes} "
                "bytes: send a shorter message"
            )


def _check_shape(
    sender: str, to: str | None, type_: str, task_id: str | None, content: str
) -> None:
    """Every field of a message well-formed and bounded; ConfigError names the first bad one."""
    if not isinstance(sender, str) or not _MEMBER_ID.fullmatch(sender):
        raise ConfigError(
            f"invalid sender {quoted(sender)}: senders are member ids, 'lead' or 'system'"
        )
    if to not in (None, "", BROADCAST) and not (isinstance(to, str) and _MEMBER_ID.fullmatch(to)):
        raise ConfigError(f"invalid recipient {quoted(to)}: a member id, 'lead' or '*'")
    _check_type_shape(type_)
    if task_id:
        check_task_id(task_id)
    if not isinstance(content, str):
        raise ConfigError("message content must be text")


def _check_type_shape(type_: str) -> None:
    if not isinstance(type_, str) or not _TYPE.fullmatch(type_):
        raise ConfigError(
            f"invalid message type {quoted(type_)}: use up to {MAX_TYPE_CHARS} letters, digits, "
            f"'.', '_' or '-', starting with a letter (default {PeerType.MESSAGE.value!r})"
        )


def _check_peer_type(type_: str) -> str:
    """A peer's type unchanged; ConfigError for a malformed one or one the runtime reserves
    (a member posing as `plan.approved` or `hook.error` would mislead the lead and the hooks)."""
    _check_type_shape(type_)
    if type_.lower() in {t.value for t in ProtocolType}:
        raise ConfigError(
            f"message type {type_!r} belongs to a protocol: only its tools send it (the lead's "
            "`teamctl team shutdown`, a teammate's respond_shutdown); valid types for a message: "
            f"{', '.join(repr(t.value) for t in PeerType)} or a type of your own outside "
            f"{', '.join(t.value for t in ProtocolType)} and {', '.join(SYSTEM_NAMESPACES)}"
        )
    if type_.lower().startswith(SYSTEM_NAMESPACES):
        peer_types = ", ".join(repr(t.value) for t in PeerType)
        raise ConfigError(
            f"message type {type_!r} is reserved for the runtime (system types: "
            f"{', '.join(t.value for t in SystemType)}, and every type starting "
            f"{', '.join(SYSTEM_NAMESPACES)}); members send {peer_types} or a type of their own "
            "outside those namespaces, such as 'peer.ask'"
        )
    return type_


def _recipients(
    roster: Roster, sender: str, to: str | None, lead_has_inbox: bool = False
) -> list[str]:
    """The inboxes that get the message (the rule `delivered_to` states); in a space where the
    lead has an inbox (a team), mail to `lead` and a teammate's broadcast land there too."""
    lead = [LEAD] if lead_has_inbox and sender != LEAD else []
    if to in (None, "", BROADCAST):
        return [m for m in roster.member_ids if m != sender] + lead
    if to == LEAD:
        return lead
    return [to] if to in roster.member_ids and to != sender else []


def entries_after(conn: redis.Redis, stream: str, entry_id: str) -> int:
    """How many entries of `stream` (an inbox) come after `entry_id`, read a page at a time
    (what a bounded read says remains unread)."""
    start, count = f"({entry_id}", 0
    while True:
        page = conn.xrange(stream, start, "+", count=COUNT_PAGE)
        count += len(page)
        if len(page) < COUNT_PAGE:
            return count
        start = f"({page[-1][0]}"


def envelope_from_stream(entry_id: str, fields: dict[str, str]) -> Envelope:
    """A bus entry (flat string fields) as its Envelope variant."""
    return ENVELOPES.validate_python({"id": entry_id, **fields})


def envelope_from_lua(entry: list[Any]) -> Envelope:
    """Stream entries from Lua arrive as [id, [k1, v1, k2, v2, ...]]."""
    entry_id, flat = entry
    return envelope_from_stream(entry_id, dict(zip(flat[0::2], flat[1::2], strict=True)))
