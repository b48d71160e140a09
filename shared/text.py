"""Text helpers shared by the board, the bus and the runtime."""

from __future__ import annotations

SHORT_CHARS = 240


def shorten(text: str | None, limit: int = SHORT_CHARS) -> str:
    """Trim, and cut to `limit` characters plus '...' (AI4J's safeShort).

    Done in Python, never in Lua: Lua counts bytes and would cut a UTF-8 character in half.
    """
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def quoted(value: object, limit: int = 60) -> str:
    """`value`'s repr for an error message, cut so a huge bad input cannot flood the message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:limit] + "..." + size
