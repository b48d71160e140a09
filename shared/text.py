"""Text helpers shared by the board, the bus and the runtime."""

from __future__ import annotations

import re
import time

SHORT_CHARS = 240
TERMINAL_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erasing
    r"|\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC, DCS, ...: titles, clipboard (52)
    r"|\x1b[ -/]*[0-~]"
)  # the rest: a reset (ESC c), a charset switch, a keypad mode
"""A terminal's escape sequence: dropped whole, not left half-shown; a string sequence (OSC and
its kin) up to its terminator, or to the end of its line when it has none."""


def shorten(text: str | None, limit: int = SHORT_CHARS) -> str:
    """Trim, and cut to `limit` characters plus '...' (AI4J's safeShort).

    Done in Python, never in Lua: Lua counts bytes and would cut a UTF-8 character in half.
    """
    text = (text or "").strip()
    return text if len(text) <= limit else text[:limit] + "..."


def one_line(text: str | None, limit: int = SHORT_CHARS) -> str:
    """`text` shortened on one line: newlines, tabs and other control characters (a terminal's
    escape sequences among them) become spaces, for outside text that reaches a terminal."""
    return shorten(flat(text), limit)


def flat(text: str | None) -> str:
    """`text` printable on one line, whole: for a name or a field inside a line of output."""
    return " ".join(printable(text).split())


def printable(text: str | None) -> str:
    """`text` with its lines kept and nothing a terminal would act on: escape sequences are
    dropped, other control characters (tabs and newlines aside; a carriage return that would
    overwrite its line among them) become spaces."""
    if not text or (text.isascii() and text.isprintable()):  # most names and numbers
        return text or ""
    text = TERMINAL_ESCAPE.sub("", text.replace("\r\n", "\n"))
    return "".join(c if c.isprintable() or c in "\n\t" else " " for c in text)


def quoted(value: object, limit: int = 60) -> str:
    """`value`'s repr for an error message, cut so a huge bad input cannot flood the message."""
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f" ({len(value)} characters)" if isinstance(value, str) else ""
    return text[:limit] + "..." + size


ECHO_CHARS = 200
"""The most of a model's own text (a path, a name, raw arguments) an error quotes back."""


def echoed(text: str, limit: int = ECHO_CHARS) -> str:
    """Model-written text as an error quotes it back: cut to `limit` characters, saying how
    long it was, so a huge input cannot come back to the model (or into a log) whole."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text)} characters]"


def clock_text(at_ms: int, now_ms: int) -> str:
    """When something happened, in local time: `14:03:07` today, `2026-01-31 14:03:07` on
    another day (the one form every line that starts with a time uses)."""
    at = time.localtime(at_ms / 1000)
    if time.localtime(now_ms / 1000)[:3] == at[:3]:
        return time.strftime("%H:%M:%S", at)
    return time.strftime("%Y-%m-%d %H:%M:%S", at)


def indented(text: str, indent: str = "    ") -> str:
    """Text of several lines under the line it starts on: each further line indented, blank
    ones left empty, tabs expanded (the text must be printable already)."""
    first, *more = text.expandtabs(4).rstrip().split("\n")
    return "\n".join([first.rstrip(), *((indent + line).rstrip() for line in more)])


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 round`, `2 rounds` (`plural` for a noun that does not just take an s): every count a
    person reads agrees with its noun."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def duration_text(duration_ms: int) -> str:
    """12.3s, 4m05s or 2h03m: short enough for a column, exact enough to compare runs."""
    seconds = max(0, duration_ms) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m{int(seconds % 60):02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"
