"""Local processes known by pid: whether one still runs, and whether it is still the same one
(a pid is reused once its process is gone, so a recorded pid alone may name a stranger)."""

from __future__ import annotations

import os
from pathlib import Path

REMOVED_SUFFIX = " (deleted)"
"""What Linux appends to /proc/<pid>/exe once the program's file is unlinked."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 checks without signalling; one we may
    not signal exists too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time in clock ticks from /proc; None off Linux or
    when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and ")"
    return fields[0], int(fields[19])


def process_start_ticks(pid: int) -> int | None:
    """When the process `pid` started, in clock ticks since boot; None off Linux or when gone."""
    stat = proc_stat(pid)
    return stat[1] if stat else None


def same_process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether the process started as `pid` at `start_ticks` still runs (not a zombie, not a
    reused pid)."""
    stat = proc_stat(pid)
    if stat is None:
        return pid_alive(pid) and start_ticks is None
    state, ticks = stat
    return state != "Z" and (start_ticks is None or ticks == start_ticks)


def executable(pid: int) -> Path | None:
    """The program file the process `pid` runs, symlinks resolved; a file removed or replaced
    since it started (an upgrade) reads as the path it had; None when it is gone or not ours to
    inspect (another user's process: /proc hides its exe)."""
    try:
        target = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None
    if target.endswith(REMOVED_SUFFIX):
        # Already the kernel's canonical path; resolving it would follow whatever took its place.
        return Path(target.removesuffix(REMOVED_SUFFIX))
    return Path(target).resolve()


def runs_program(pid: int, program: str | None) -> bool:
    """Whether the process `pid` runs `program` (a path `executable` gave when it started), an
    upgrade since then included; True when nothing was recorded to compare."""
    return program is None or str(executable(pid)) == program


def still_running(pid: int, start_ticks: int | None, program: str | None) -> bool:
    """Whether the process `pid` that started at `start_ticks` still runs `program`: compared
    only where /proc shows it, since a worker hides it from its own user (not dumpable:
    worker/process_privacy.py), and pid and start time identify a process already."""
    return same_process_alive(pid, start_ticks) and (
        executable(pid) is None or runs_program(pid, program)
    )


def working_dir(pid: int) -> Path | None:
    """The current directory of the process `pid`; None when it is gone or not ours."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def command_name(pid: int) -> str | None:
    """The name the process `pid` was started as (its program's file name, at most 15 bytes);
    None when it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None
