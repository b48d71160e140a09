"""How unread mail reaches a model: one `<inbox>` user block, one JSON object per message.

A teammate's turn (worker/teams/turn.py) and the lead agent (coordinator/teams/lead.py)
inject their unread messages this way before every model call; the block's shape is the same for
both. What one step (or one read_inbox answer) carries is bounded (`unread_batch`): at most
`inbox_batch_messages` messages within `tool_result_max_chars` characters, the rest left unread
for the next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from teamctl.shared.agent.result_bounds import cut_to_fit
from teamctl.shared.bus import entries_after
from teamctl.shared.envelopes import Envelope

if TYPE_CHECKING:  # the store imports agent modules; the batch only reads through it
    from teamctl.shared.teams.options import TeamOptions
    from teamctl.shared.teams.team_store import TeamStore

WRAPPER_CHARS = 200
"""Room kept beside the messages for the block's tags or the read_inbox answer's other keys."""


@dataclass(frozen=True)
class InboxBatch:
    """One bounded batch of a member's unread mail: what the model sees of each message, the
    inbox id the batch covers (the offset a checkpoint moves to; '' for none) and how many
    messages stay unread after it."""

    lines: list[dict[str, Any]]
    offset: str
    remaining: int

    def block(self) -> str:
        """The batch as one `<inbox>` user block ('' when it carries no message)."""
        if not self.lines:
            return ""
        return lines_block(self.lines)

    def answer(self) -> dict[str, Any]:
        """The batch as the read_inbox tool answers it (a peek: nothing is marked read)."""
        result: dict[str, Any] = {
            "action": "read_inbox",
            "ok": True,
            "messages": self.lines,
            "remaining": self.remaining,
        }
        if self.remaining:
            result["note"] = (
                f"{self.remaining} more unread; they reach you in <inbox> blocks "
                "before your next steps"
            )
        return result


def inbox_block(messages: list[Envelope]) -> str:
    """Unread messages as one user block: `<inbox>`, one JSON object per line, `</inbox>`."""
    return lines_block([inbox_line(m) for m in messages])


def lines_block(lines: list[dict[str, Any]]) -> str:
    """What the model sees of each message, as one `<inbox>` user block."""
    return "<inbox>\n" + "\n".join(_dumped(line) for line in lines) + "\n</inbox>"


def inbox_line(message: Envelope) -> dict[str, Any]:
    """What the model sees of one message; protocol messages add their request_id."""
    line = {
        "id": message.id,
        "from": message.from_,
        "type": message.type,
        "content": message.content,
    }
    request_id = getattr(message, "request_id", None)
    if request_id:
        line["request_id"] = request_id
    return line


def unread_batch(store: TeamStore, member: str, options: TeamOptions | None = None) -> InboxBatch:
    """The member's next unread messages, left unread: at most the team's inbox_batch_messages,
    in at most tool_result_max_chars characters (a first message longer than that alone is cut,
    saying so), with how many stay unread after them. `options`: the team's, by default."""
    options = options or store.options
    peeked_last, messages = store.messages.peek(
        member, limit=options.inbox_batch_messages, seen=True
    )
    budget = max(options.tool_result_max_chars - WRAPPER_CHARS, options.tool_result_max_chars // 2)
    lines: list[dict[str, Any]] = []
    used = 0
    for message in messages:
        line = inbox_line(message)
        size = len(_dumped(line)) + 1
        if used + size > budget:
            if not lines:
                lines.append(cut_to_fit(line, ["content"], budget, {"content": "message"}))
            break
        lines.append(line)
        used += size
    offset = peeked_last if len(lines) == len(messages) else str(lines[-1]["id"])
    # Nothing peeked means nothing unread; otherwise count what lies past the batch.
    return InboxBatch(
        lines, offset, entries_after(store.conn, store.keys.inbox(member), offset) if offset else 0
    )


def _dumped(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False)
