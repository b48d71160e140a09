"""Workers a `teamctl run` starts stop when that run is gone, even after a `kill -9` of it.

The run passes its pid to its workers in the environment; each such worker checks at once, before
its preload (which takes seconds), whether that process is gone, and exits if so; after the
preload it polls whether that process is still its parent (an orphan is re-parented, so its
parent pid changes) and then asks itself for RQ's warm shutdown: SIGTERM, which finishes the job
in hand and exits. A polling thread rather than Linux's PR_SET_PDEATHSIG: that fires when the
parent *thread* exits and needs a preexec_fn in a process that may have threads; polling works on
any OS. Workers started by hand have no such variable and are never touched. A run's worker
forked from a preloaded parent watches that parent the same way, and the parent watches the run
(worker/fork_server.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping

from teamctl.shared.process.pids import pid_alive

PARENT_PID_ENV = "TEAMCTL_PARENT_PID"
"""Set by LocalWorkers on the workers it starts: the pid of the run that owns them."""
POLL_INTERVAL_S = 1.0

log = logging.getLogger(__name__)


def _parent_pid(environ: Mapping[str, str]) -> int | None:
    raw = environ.get(PARENT_PID_ENV, "")
    return int(raw) if raw.isdigit() else None


def parent_gone(environ: Mapping[str, str]) -> bool:
    """Whether a run started this process and has exited since (it was re-parented). A
    variable inherited from a process that is alive but not the parent is someone else's."""
    parent = _parent_pid(environ)
    return parent is not None and parent != os.getppid() and not pid_alive(parent)


def exit_if_parent_gone(environ: Mapping[str, str]) -> None:
    """Exit now when the run that started this worker is gone: it must not take a job."""
    if parent_gone(environ):
        log.warning(
            "the teamctl run that started this worker (pid %s) is gone; exiting",
            environ.get(PARENT_PID_ENV),
        )
        sys.exit(0)


def watch_parent(
    environ: Mapping[str, str], interval_s: float = POLL_INTERVAL_S
) -> threading.Thread | None:
    """Start the watch if this process was started by a run; None for a worker started by hand
    (or one that inherited the variable from a live process that is not its parent)."""
    parent = _parent_pid(environ)
    if parent is None or (parent != os.getppid() and pid_alive(parent)):
        return None
    thread = threading.Thread(
        target=_stop_when_orphaned,
        args=(parent, interval_s),
        name="teamctl-parent-watch",
        daemon=True,
    )
    thread.start()
    return thread


def _stop_when_orphaned(parent_pid: int, interval_s: float) -> None:
    tick = threading.Event()
    while os.getppid() == parent_pid:
        tick.wait(interval_s)
    log.warning(
        "the process that started this worker (pid %d: its teamctl run, or the preloaded parent "
        "it was forked from) is gone; stopping after the current job",
        parent_pid,
    )
    os.kill(os.getpid(), signal.SIGTERM)
