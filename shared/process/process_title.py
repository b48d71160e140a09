"""A process's command line as `ps` and /proc/PID/cmdline show it, rewritten in place: a worker
forked from a preloaded parent would otherwise show the parent's command.

Linux keeps a process's arguments where its program started, and /proc reads them from there; a
process may write over that memory (as setproctitle does), within its length: a longer command
is cut short. Without /proc (not Linux) nothing changes.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

ARG_START_FIELD = 48
"""/proc/PID/stat's field (1-based, man 5 proc) with the address where the arguments start."""


def set_command_line(args: list[str]) -> bool:
    """Show `args` as this process's command line; False where that is not possible."""
    try:
        text = Path("/proc/self/stat").read_text()
    except OSError:
        return False
    # Fields after the command name (which may hold spaces and ")") start at field 3.
    fields = text[text.rindex(")") + 2 :].split()
    try:
        start, end = (int(fields[ARG_START_FIELD - 3 + i]) for i in (0, 1))
    except (IndexError, ValueError):
        return False
    size = end - start
    if size <= 1:
        return False
    data = b"\0".join(arg.encode(errors="surrogateescape") for arg in args)[: size - 1]
    # Padded with NULs to the end: the last byte stays NUL, so /proc reads no further.
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)
    return True
