"""A worker's child that must not outlive it: the parent-death signal, armed right after fork."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when `parent_pid` (its parent) dies, and exit now if it already
    did; nothing where prctl is missing (the worker's stop still ends the child)."""
    with contextlib.suppress(OSError, AttributeError):
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the signal was armed
        os._exit(1)
