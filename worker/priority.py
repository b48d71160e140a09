"""A worker's CPU priority: below the processes a run waits on when the host is busy.

A worker's jobs are batch work (agent loops, the tools they run); the coordinator's round loop,
Redis, and a user's `teamctl status` are what everyone waits on. With every core busy, a worker
at the default niceness takes its even share from them: beside eight CPU-bound processes on two
cores, a `teamctl status` of 0.36 s of CPU took 1.75 s. Niceness decides only who runs first
when processes compete, so a worker alone on its host, or on idle cores, runs at full speed all
the same.
"""

from __future__ import annotations

import contextlib
import os


def lower_priority(nice: int) -> int:
    """Raise the calling thread's niceness (on Linux, the processes and threads it starts
    afterwards inherit it) to `nice` if it is below; never lower it (an unprivileged process
    cannot, and a worker started with `nice -n 15` keeps 15), and 0 changes nothing. Returns
    the niceness it has now; one the system refuses leaves it as it was."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if nice and current < nice:
        with contextlib.suppress(OSError):  # a sandbox that forbids it: run as started
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    return os.getpriority(os.PRIO_PROCESS, 0)
