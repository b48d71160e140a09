"""The message bus: one stream per run plus a fan-out inbox stream per member.

Fan-out on write keeps `read_unread` proportional to the new messages for that member: a read is
one XRANGE on the member's own inbox after its offset, never a scan of everyone's traffic.
"""

from __future__ import annotations

import time

import redis

from shared.errors import ConfigError
from shared.ids import BROADCAST, RESERVED_MEMBER_IDS
from shared.keys import RunKeys
from shared.models import Envelope
from shared.scripts import Scripts

BUS_MAXLEN = 100_000
READ_BATCH = 1000
SHORT_CHARS = 240


def shorten(text: str | None, limit: int = SHORT_CHARS) -> str:
    """Trim, and cut to `limit` characters plus '...' (AI4J's safeShort)."""
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _envelope(entry_id: str, fields: dict[str, str]) -> Envelope:
    return Envelope.model_validate({
        "id": fields.get("ref", entry_id), "from": fields["from"], "to": fields["to"] or None,
        "type": fields["type"], "task_id": fields["task_id"] or None,
        "content": fields["content"], "created_at": int(fields["created_at"]),
    })


class MessageBus:
    """Publishing and reading the messages of one run."""

    def __init__(self, conn: redis.Redis, run_id: str, member_ids: list[str], *,
                 enabled: bool = True, max_message_bytes: int = 65536,
                 scripts: Scripts | None = None) -> None:
        self.conn = conn
        self.keys = RunKeys(run_id)
        self.member_ids = list(member_ids)
        self.enabled = enabled
        self.max_message_bytes = max_message_bytes
        self.scripts = scripts or Scripts(conn)

    def publish(self, sender: str, to: str | None, type_: str, task_id: str | None,
                content: str) -> Envelope | None:
        """Append a message (no recipient checks: runtime messages); None when the bus is off."""
        if not self.enabled:
            return None
        created_at = int(time.time() * 1000)
        inboxes = [self.keys.inbox(m) for m in self._recipients(sender, to)]
        entry_id = self.scripts["publish"](
            keys=[self.keys.bus, *inboxes],
            args=[sender, to or "", type_, task_id or "", content, created_at, BUS_MAXLEN])
        return Envelope.model_validate({
            "id": entry_id, "from": sender, "to": to, "type": type_, "task_id": task_id,
            "content": content, "created_at": created_at})

    def send(self, sender: str, to: str, type_: str, task_id: str | None,
             content: str) -> Envelope | None:
        """A peer message: the recipient must be a member of the run (or '*')."""
        self._check_peer_message(to, type_, content)
        return self.publish(sender, to, type_, task_id, content)

    def read_unread(self, member_id: str) -> list[Envelope]:
        """Messages for the member since its last read, each exactly once, in order."""
        if not self.enabled or member_id not in self.member_ids:
            return []
        messages: list[Envelope] = []
        while True:
            entries = self.scripts["read_unread"](
                keys=[self.keys.inbox(member_id), self.keys.read_offsets],
                args=[member_id, READ_BATCH])
            messages.extend(_envelope(eid, dict(_pairs(f))) for eid, f in entries)
            if len(entries) < READ_BATCH:
                return messages

    def history_for(self, member_id: str, limit: int) -> list[Envelope]:
        """The last `limit` messages addressed to the member (all when limit <= 0)."""
        if not self.enabled:
            return []
        count = None if limit <= 0 else limit
        entries = self.conn.xrevrange(self.keys.inbox(member_id), count=count)
        return [_envelope(eid, fields) for eid, fields in reversed(entries)]

    def messages(self) -> list[Envelope]:
        """Every message of the run, in order."""
        return [_envelope(eid, fields) for eid, fields in self.conn.xrange(self.keys.bus)]

    def _recipients(self, sender: str, to: str | None) -> list[str]:
        if to in (None, "", BROADCAST):
            return [m for m in self.member_ids if m != sender]
        return [to] if to in self.member_ids else []

    def _check_peer_message(self, to: str, type_: str, content: str) -> None:
        if to != BROADCAST and (to in RESERVED_MEMBER_IDS or to not in self.member_ids):
            raise ConfigError(
                f"unknown team member: {to}; send to one of: {', '.join(self.member_ids)}")
        if not type_ or not type_.strip() or len(type_) > 64 or any(c.isspace() for c in type_):
            raise ConfigError(f"invalid message type {type_!r}: use a short word like peer.message")
        size = len(content.encode("utf-8"))
        if size > self.max_message_bytes:
            raise ConfigError(
                f"message content is {size} bytes; the limit is {self.max_message_bytes} bytes")


def _pairs(flat: list[str]) -> list[tuple[str, str]]:
    """XRANGE replies from Lua arrive as flat [k1, v1, k2, v2] lists."""
    return list(zip(flat[0::2], flat[1::2], strict=True))
