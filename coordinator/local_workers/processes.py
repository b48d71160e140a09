"""Local `rq worker` processes for `teamctl run --workers N`, forked from a preloaded parent of the
run's own, stopped by pid, and stopping by themselves if the run that started them is killed."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Protocol

from teamctl.coordinator.local_workers.early_parent import EarlyParent
from teamctl.coordinator.local_workers.preloaded_parent import (
    own_parent_wanted,
    remove_socket_dir,
    start_parent,
)
from teamctl.coordinator.local_workers.worker_hints import StartedWorker
from teamctl.shared.errors import InfraError, Interrupted
from teamctl.shared.process.fork_server_client import spawn
from teamctl.shared.process.fork_server_socket import FORK_SERVER_ENV, NO_FORK_SERVER
from teamctl.shared.process.parent_watch import PARENT_PID_ENV
from teamctl.shared.process.pids import process_start_ticks
from teamctl.shared.process.private_files import private_dir, private_opener
from teamctl.shared.redis.connection import (
    FINISHING_WORKER_CLASSES,
    WORKER_CLASS,
    WORKER_CONNECTION_CLASS,
)

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10.0
LET_GO_WAIT_S = 1.0
"""How long an interrupted run waits for its workers before it exits (they stop by themselves)."""
URL_ENV = "RQ_REDIS_URL"
"""Where `rq worker` reads its URL when -u is not given; unlike argv, other users cannot read a
process's environment, and the embedded server's URL holds its password."""
SETTINGS_MODULE = "teamctl.worker.settings"
"""The RQ settings module that preloads litellm in each worker (RQ_CONFIG, or -c)."""


def worker_env(environ: Mapping[str, str], redis_url: str | None) -> dict[str, str]:
    """The environment of the documented worker, `rq worker QUEUE...` with no flags: RQ reads its
    settings module, teamctl's worker and client classes and its URL from these variables (a
    worker class the person chose in RQ_WORKER_CLASS is kept). Without `redis_url` the settings
    module finds the Redis teamctl uses."""
    env = {
        **environ,
        "RQ_CONFIG": SETTINGS_MODULE,
        "RQ_CONNECTION_CLASS": WORKER_CONNECTION_CLASS,
        "RQ_WORKER_CLASS": environ.get("RQ_WORKER_CLASS") or WORKER_CLASS,
    }
    if redis_url:
        env[URL_ENV] = redis_url
    return env


def worker_command(
    redis_url: str | None,
    queues: list[str],
    *,
    worker_class: str | None = None,
    name: str | None = None,
) -> list[str]:
    """The explicit form of the documented worker command (flags instead of RQ_* variables), for
    a host whose environment we do not control; without `redis_url` it reads $RQ_REDIS_URL."""
    command = [
        sys.executable,
        "-m",
        "rq.cli",
        "worker",
        "-c",
        SETTINGS_MODULE,
        "--connection-class",
        WORKER_CONNECTION_CLASS,
    ]
    if redis_url:
        command += ["-u", redis_url]
    if worker_class:
        command += ["-w", worker_class]
    if name:
        command += ["-n", name]
    return command + queues


class WorkerProcess(Protocol):
    """A started worker: an executed `python -m rq.cli` (a Popen) or one a fork server forked."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, signum: int) -> None: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


def start_worker(
    rq_args: list[str],
    env: dict[str, str],
    log_file: IO[bytes],
    *,
    new_session: bool = False,
    parent: str | None = None,
    early: bool = False,
) -> WorkerProcess:
    """Start `rq <rq_args>` as a worker writing to `log_file`: forked by the preloaded parent
    listening at `parent` (`early`: before the end of its preload, fork_server_client's
    SpawnRequest), else by the fork server the environment names (worker/fork_server.py), else
    executed."""
    named = env.get(FORK_SERVER_ENV)
    socket_path = parent or (named if named != NO_FORK_SERVER else None)
    if socket_path:
        return spawn(
            socket_path, rq_args, env, log_file.fileno(), new_session=new_session, early=early
        )
    return subprocess.Popen(
        [sys.executable, "-m", "rq.cli", *rq_args],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=new_session,
    )


class LocalWorkers:
    """A group of worker processes owned by this command."""

    def __init__(
        self,
        redis_url: str,
        queues: list[str],
        count: int,
        log_dir: Path,
        early: EarlyParent | None = None,
        *,
        planner_first: bool = False,
    ) -> None:
        self.redis_url = redis_url
        self.queues = queues
        self.count = count
        self.log_dir = log_dir
        self.early = early
        """The parent the CLI started for these workers before it parsed its command line."""
        self.planner_first = planner_first
        """Have a parent of this process's fork the first worker as soon as it has loaded what
        the planner's job needs (the others after its whole preload, in the background): for
        a run whose members use no MCP server (a member task's MCP listing, which may come
        before that worker has the SDK, would import it in its job)."""
        self._starting: threading.Thread | None = None
        self.processes: list[WorkerProcess] = []
        self.parent: subprocess.Popen[bytes] | None = None
        """The preloaded parent the workers are forked from, when teamctl started one."""
        self._parent_socket = ""
        self._previous_sigterm: object = None

    def __enter__(self) -> LocalWorkers:
        self._previous_sigterm = _exit_on_sigterm()
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt | Interrupted):
            self.let_go()  # a person is waiting for the prompt: no 10 s warm shutdown here
        else:
            self.stop()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)  # type: ignore[arg-type]

    def start(self) -> None:
        """Start the workers, each logging to its own file under `log_dir`: forked from a
        preloaded parent of this process's (its log beside theirs; the early one, if it was
        started for them), unless the environment names a fork server or `off`."""
        private_dir(self.log_dir)
        env = worker_env(os.environ, self.redis_url)
        # They stop when this process is gone, even after a kill -9 of it: executed ones watch
        # it, forked ones watch their parent, which watches it.
        env[PARENT_PID_ENV] = str(os.getpid())
        socket_path = None
        if self.count and own_parent_wanted(os.environ):
            early = self.early.take(os.environ, self.log_dir) if self.early else None
            self.parent, parent = early or start_parent(
                os.environ,
                self.log_dir / f"parent-{os.getpid()}.log",
                run_pid=os.getpid(),
            )
            socket_path = self._parent_socket = parent.socket
        elif self.early is not None:
            self.early.discard()
        planner_first = (
            socket_path is not None
            and self.planner_first
            and env["RQ_WORKER_CLASS"] in FINISHING_WORKER_CLASSES
        )
        for index in range(1 if planner_first else self.count):
            self._start_one(index, env, socket_path, early=planner_first)
        if planner_first and self.count > 1:
            # Meanwhile the run goes on: its planner's job needs the first worker only.
            self._starting = threading.Thread(
                target=self._start_rest, args=(env, socket_path), name="teamctl-workers"
            )
            self._starting.start()

    def _start_one(
        self, index: int, env: dict[str, str], socket_path: str | None, *, early: bool = False
    ) -> None:
        with open(self._log_path(index), "ab", opener=private_opener) as log_file:
            self.processes.append(
                start_worker(
                    ["worker", *self.queues], env, log_file, parent=socket_path, early=early
                )
            )

    def _start_rest(self, env: dict[str, str], socket_path: str) -> None:
        """The workers after the first (in a thread of their own); one that cannot start is a
        warning, as the run goes on with those that did."""
        for index in range(1, self.count):
            try:
                self._start_one(index, env, socket_path)
            except (InfraError, OSError) as exc:
                log.warning("local worker %d of %d not started: %s", index + 1, self.count, exc)
                return

    def _started_all(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Wait at most `timeout_s` for the workers still being started (their parent answers
        within its preload); one it forks later is stopped with it, its parent."""
        if self._starting is not None:
            self._starting.join(timeout=timeout_s)
            self._starting = None

    def started(self) -> list[StartedWorker]:
        """The workers started, for hints that say they are starting."""
        return [
            StartedWorker(
                p.pid, process_start_ticks(p.pid), tuple(self.queues), str(self._log_path(index))
            )
            for index, p in enumerate(self.processes)
        ]

    def _log_path(self, index: int) -> Path:
        return self.log_dir / f"worker-{os.getpid()}-{index}.log"

    def let_go(self, wait_s: float = LET_GO_WAIT_S) -> None:
        """Ask each worker for RQ's warm shutdown and wait at most `wait_s` in all: one busy
        with a job finishes it (a cancelled run's job stops at its next model call) and exits
        by itself, never killed mid-job."""
        self._started_all(wait_s)
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.01, deadline - time.monotonic()))
        finished = all(process.poll() is not None for process in self.processes)
        self.processes.clear()
        if self.parent is not None and finished:
            self._stop_parent(self.parent)
        # Else it stays for the workers still finishing, and exits once this process is gone.
        self.parent = None

    def stop(self) -> None:
        """Warm shutdown (SIGTERM) by pid, then SIGKILL whatever is left after the timeout."""
        self._started_all()
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            wait_or_kill(process, max(0.1, deadline - time.monotonic()))
        self.processes.clear()
        if self.parent is not None:  # its workers are gone: nothing of theirs is cut short
            self._stop_parent(self.parent)
            self.parent = None

    def _stop_parent(self, parent: subprocess.Popen[bytes]) -> None:
        stop_process(parent)
        remove_socket_dir(self._parent_socket)  # gone already, unless it was killed


def stop_process(process: WorkerProcess, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM one child by pid (RQ's warm shutdown), SIGKILL it if it outlives `timeout_s`."""
    if process.poll() is None:
        process.terminate()
    wait_or_kill(process, timeout_s)


def wait_or_kill(process: WorkerProcess, timeout_s: float) -> None:
    """Wait for a child to exit; SIGKILL it after `timeout_s`."""
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _exit_on_sigterm() -> object:
    """Turn SIGTERM into SystemExit so `with LocalWorkers` stops its children on the way out
    (by default SIGTERM ends the process at once and orphans them); None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def exit_now(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, exit_now)
