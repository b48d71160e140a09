"""How unread mail reaches a model: one `<inbox>` user block, one JSON object per message.

A teammate's turn (worker/turn.py) and the lead agent (coordinator/lead) inject their unread
messages this way before every model call; the block's shape is the same for both.
"""

from __future__ import annotations

import json
from typing import Any

from teamctl.shared.models import Envelope


def inbox_block(messages: list[Envelope]) -> str:
    """Unread messages as one user block: `<inbox>`, one JSON object per line, `</inbox>`."""
    lines = [json.dumps(inbox_line(m), ensure_ascii=False) for m in messages]
    return "<inbox>\n" + "\n".join(lines) + "\n</inbox>"


def inbox_line(message: Envelope) -> dict[str, Any]:
    """What the model sees of one message; protocol messages add their request_id."""
    line = {"id": message.id, "from": message.from_, "type": message.type,
            "content": message.content}
    request_id = getattr(message, "request_id", None)
    if request_id:
        line["request_id"] = request_id
    return line
