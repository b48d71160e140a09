"""The preloaded parent of `teamctl run --workers N`, started from the command line as typed,
before the CLI imports what the run needs.

That parent's preload (litellm: ~3 s of CPU) is most of what a cold run waits for before its
first model request. Started by LocalWorkers (processes.py), it began only once the CLI had
imported its modules, read the team file and stored the run (~0.4 s, more on a busy machine);
started here, it preloads on another core meanwhile, and LocalWorkers takes it over
(EarlyParent.take). One it does not take (a usage or configuration error, another environment)
is stopped by pid. Only the standard library and teamctl's light modules load here, and only for
such a run: pydantic and click's command tree come after the parent has started.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

    from teamctl.coordinator.local_workers.preloaded_parent import PreloadedParent

RUN_VERB = "run"
WORKERS_FLAG = "--workers"
STOP_TIMEOUT_S = 5.0
"""How long an unused parent has to exit on SIGTERM before it is killed (it holds no work)."""


def run_workers(argv: Sequence[str]) -> int | None:
    """N in `run ... --workers N` (`argv`: the arguments after `teamctl`), read without click;
    None for another verb, no such flag, one that does not parse, or a request for help (click
    then says what is wrong, or prints the help)."""
    if not argv or argv[0] != RUN_VERB:
        return None
    value = None
    rest = list(argv[1:])
    while rest:
        arg = rest.pop(0)
        if arg == "--":  # the objective follows, whatever it looks like
            break
        if arg == "--help":
            return None
        if arg == WORKERS_FLAG and rest:
            value = rest.pop(0)
        elif arg.startswith(f"{WORKERS_FLAG}="):
            value = arg.partition("=")[2]
    return int(value) if value is not None and value.isdigit() else None


def log_dir(environ: Mapping[str, str]) -> Path:
    """Where the run's workers log, read as Settings.state_dir reads it (an empty variable
    counts as unset); LocalWorkers takes the parent only when its own log directory is this."""
    state = environ.get("TEAMCTL_STATE_DIR") or os.path.join(
        environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state"), "teamctl"
    )
    return Path(state) / "logs"


@dataclass
class EarlyParent:
    """A run's preloaded parent started before its LocalWorkers: what it was started for (this
    process, its working directory, the parent's part of the environment, the log directory),
    and whether LocalWorkers has taken it."""

    process: subprocess.Popen[bytes]
    parent: PreloadedParent
    env: dict[str, str]
    cwd: str
    log_dir: Path
    run_pid: int
    taken: bool = field(default=False)

    def take(
        self, environ: Mapping[str, str], log_dir: Path
    ) -> tuple[subprocess.Popen[bytes], PreloadedParent] | None:
        """This parent, for the LocalWorkers of this process with this environment and log
        directory, while it runs; else None, and it is stopped (LocalWorkers starts another)."""
        from teamctl.coordinator.local_workers.preloaded_parent import parent_env

        cwd = os.getcwd()
        same = (
            self.run_pid == os.getpid()
            and self.cwd == cwd
            and self.log_dir == log_dir
            and self.env == parent_env(environ, cwd)
        )
        if same and not self.taken and self.process.poll() is None:
            self.taken = True
            return self.process, self.parent
        self.discard()
        return None

    def discard(self) -> None:
        """Stop it by pid and remove its socket, unless LocalWorkers took it (at this process's
        exit: a command that never started its workers)."""
        import subprocess

        from teamctl.coordinator.local_workers.preloaded_parent import remove_socket_dir

        if self.taken:
            return
        self.taken = True  # once
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        remove_socket_dir(self.parent.socket)


def start_early(argv: Sequence[str], environ: Mapping[str, str]) -> EarlyParent | None:
    """The parent of the run `argv` asks for, started now, when it starts workers of its own
    (`run --workers N`, N > 0) from a parent of teamctl's own; None otherwise, or when it cannot
    start here (LocalWorkers then starts it, or says why it cannot). Any other command line
    imports nothing more here."""
    count = run_workers(argv)
    if not count:
        return None
    from teamctl.coordinator.local_workers.preloaded_parent import (
        own_parent_wanted,
        parent_env,
        start_parent,
    )
    from teamctl.shared.process.private_files import private_dir

    if not own_parent_wanted(environ):
        return None
    logs = log_dir(environ)
    try:
        private_dir(logs)
        process, parent = start_parent(
            environ, logs / f"parent-{os.getpid()}.log", run_pid=os.getpid()
        )
    except (OSError, RuntimeError):  # met again, and reported, by LocalWorkers
        return None
    return EarlyParent(
        process,
        parent,
        env=parent_env(environ, os.getcwd()),
        cwd=os.getcwd(),
        log_dir=logs,
        run_pid=os.getpid(),
    )
