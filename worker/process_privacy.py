"""A worker's environment (REDIS_URL, provider keys) kept from the programs its tools start.

`bash` and stdio MCP servers start with a minimal environment, but a program of the same user may
still read a worker's through /proc/<pid>/environ (its parent, the work-horse, and the worker
above it). A process that is not dumpable has those files owned by root, so a same-user program
cannot read them; the flag is inherited by forked work-horses and dropped again at exec, so the
programs the tools start stay ordinary. Root reads them anyway: run workers as their own user.
Debuggers of the same user (py-spy, gdb) cannot attach either.
"""

from __future__ import annotations

import ctypes
import sys

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def keep_environment_private() -> bool:
    """Make this process not dumpable; False where that is not possible (not Linux)."""
    return _prctl(PR_SET_DUMPABLE, 0) == 0


def environment_private() -> bool:
    """Whether this process is not dumpable (its /proc files hidden from its user)."""
    return _prctl(PR_GET_DUMPABLE) == 0


def _prctl(option: int, value: int = 0) -> int | None:
    """prctl(2)'s answer; None off Linux, or where libc has no prctl."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return None
