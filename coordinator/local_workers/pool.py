"""The warm local pool: preloaded `rq worker` processes that outlive the `teamctl run` that
started them and serve the next one, like the embedded Redis; recorded by pid in the state dir,
stopped by pid, and exiting by themselves after `--idle-exit` seconds without a job. They are
forked from one preloaded parent of the pool's (preloaded_parent.py), recorded and stopped by pid
too, which exits by itself POOL_LINGER_S after its last worker."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from teamctl.coordinator.local_workers.preloaded_parent import (
    POOL_LINGER_S,
    PreloadedParent,
    own_parent_wanted,
    parent_env,
    remove_socket_dir,
    start_parent,
)
from teamctl.coordinator.local_workers.processes import (
    STOP_TIMEOUT_S,
    WorkerProcess,
    start_worker,
    worker_env,
)
from teamctl.shared.errors import InfraError
from teamctl.shared.process.parent_watch import PARENT_PID_ENV
from teamctl.shared.process.pids import (
    executable,
    process_start_ticks,
    still_running,
)
from teamctl.shared.process.private_files import (
    checked_private_dir,
    private_dir,
    private_opener,
    write_private,
)

DEFAULT_POOL_SIZE = 2
DEFAULT_IDLE_EXIT_S = 600


@dataclass(frozen=True)
class PoolWorker:
    """One recorded pool worker: its pid, when it started (to tell a reused pid from it), the
    Redis it serves (a digest: the URL holds a password), its queues, and keyed digests of the
    environment it was started with (job_env.py beside this module; none: an older teamctl's)."""

    pid: int
    start_ticks: int | None
    redis_id: str
    queues: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log: str = ""
    """Where its output goes (a worker that dies at start says why there)."""
    retiring: bool = False
    """Asked to stop (replaced by workers of another environment): it serves no new run."""
    program: str | None = None
    """The program it runs (processes.executable); None off Linux, or an older teamctl's."""

    @property
    def env_key(self) -> str:
        """A short name for the environment it has: workers started together share it."""
        if not self.env:
            return "-"
        text = "\n".join(f"{name}={digest}" for name, digest in sorted(self.env.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a reused pid, still the
        program it started as): only then may `stop` signal it."""
        return still_running(self.pid, self.start_ticks, self.program)

    def serves(self, redis_id: str, queues: list[str]) -> bool:
        """Whether it listens on every one of `queues` of this Redis, and is not retiring."""
        return self.redis_id == redis_id and set(queues) <= set(self.queues) and not self.retiring


def redis_identity(redis_url: str) -> str:
    """A short digest naming a Redis without keeping its URL (and password) in the record."""
    return hashlib.sha256(redis_url.encode()).hexdigest()[:16]


class WorkerPool:
    """The pool recorded in `root` (the state dir's `pool`)."""

    def __init__(self, root: Path, log_dir: Path) -> None:
        self.root = root.absolute()
        self.log_dir = log_dir
        self.record = self.root / "workers.json"
        self.parents_record = self.root / "parents.json"

    def env_digests(self, environ: Mapping[str, str], cwd: str) -> dict[str, str]:
        """`environ` and `cwd` as this pool records them (under its salt)."""
        from teamctl.coordinator.local_workers.job_env import EnvDigests, load_salt

        checked_private_dir(self.root, tighten=True)
        return EnvDigests(load_salt(self.root / "salt")).of(environ, cwd)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One command at a time reads and changes the pool (two runs must not both start one)."""
        checked_private_dir(self.root, tighten=True)
        with open(self.root / "pool.lock", "w", opener=private_opener) as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def members(self) -> list[PoolWorker]:
        """The recorded workers, dead ones included."""
        try:
            rows = json.loads(self.record.read_text())
        except FileNotFoundError:
            return []
        except ValueError:
            return []  # a torn or hand-edited record: its pids cannot be trusted to signal
        known = set(PoolWorker.__dataclass_fields__)
        return [PoolWorker(**{k: v for k, v in row.items() if k in known}) for row in rows]

    def live(
        self, redis_url: str | None = None, queues: list[str] | None = None
    ) -> list[PoolWorker]:
        """The recorded workers still running; only those serving `queues` of `redis_url`."""
        alive = [w for w in self.members() if w.alive()]
        if redis_url is None:
            return alive
        return [w for w in alive if w.serves(redis_identity(redis_url), queues or [])]

    def start(
        self,
        redis_url: str,
        queues: list[str],
        count: int,
        idle_exit_s: int,
        environ: Mapping[str, str],
        digests: dict[str, str],
    ) -> list[PoolWorker]:
        """Start `count` detached preloaded workers in this process's working directory, with
        `environ` (whose digests are `digests`), and record them with the live ones: forked
        from the pool's parent for `environ` (started now if there is none)."""
        private_dir(self.log_dir)
        env = worker_env(environ, redis_url)
        env.pop(PARENT_PID_ENV, None)  # a pool worker outlives whoever started it
        parent = self._parent(environ) if count and own_parent_wanted(environ) else None
        started = []
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for index in range(count):
            log_path = self.log_dir / f"pool-{stamp}-{os.getpid()}-{index}.log"
            try:
                process = self._start_one(queues, idle_exit_s, env, log_path, parent)
            except InfraError:
                if parent is None:
                    raise
                # It exited as this request came (its linger was over): once, with a new one.
                parent = self._parent(environ, fresh=True)
                process = self._start_one(queues, idle_exit_s, env, log_path, parent)
            program = executable(process.pid)  # a worker forked or executed: the same Python
            started.append(
                PoolWorker(
                    process.pid,
                    process_start_ticks(process.pid),
                    redis_identity(redis_url),
                    list(queues),
                    digests,
                    str(log_path),
                    program=None if program is None else str(program),
                )
            )
        self._write([*self.live(), *started])
        return started

    def _start_one(
        self,
        queues: list[str],
        idle_exit_s: int,
        env: dict[str, str],
        log_path: Path,
        parent: PreloadedParent | None,
    ) -> WorkerProcess:
        with open(log_path, "ab", opener=private_opener) as log_file:
            return start_worker(  # its own session: a Ctrl-C in the shell spares it
                ["worker", "--max-idle-time", str(idle_exit_s), *queues],
                env,
                log_file,
                new_session=True,
                parent=None if parent is None else parent.socket,
            )

    def parent_key(self, environ: Mapping[str, str]) -> str:
        """A digest of what a parent started from `environ` would preload with: its variables
        and the teamctl install (under the pool's salt)."""
        digests = self.env_digests(parent_env(environ, os.getcwd()), "")
        text = "\n".join(f"{name}={digest}" for name, digest in sorted(digests.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def parents(self) -> list[PreloadedParent]:
        """The recorded parents still running."""
        return [p for p in self._recorded_parents() if p.alive()]

    def _recorded_parents(self) -> list[PreloadedParent]:
        try:
            rows = json.loads(self.parents_record.read_text())
        except (FileNotFoundError, ValueError):
            return []  # a torn or hand-edited record: its pids cannot be trusted to signal
        known = set(PreloadedParent.__dataclass_fields__)
        return [PreloadedParent(**{k: v for k, v in row.items() if k in known}) for row in rows]

    def _parent(self, environ: Mapping[str, str], *, fresh: bool = False) -> PreloadedParent:
        """The live parent for `environ`, else a new one, recorded (a parent of another
        environment is left to exit after its last worker)."""
        key = self.parent_key(environ)
        live = self.parents()
        for parent in live:
            if parent.key == key and not fresh:
                return parent
        log_path = self.log_dir / f"pool-parent-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        _, started = start_parent(environ, log_path, linger_s=POOL_LINGER_S)
        parent = replace(started, key=key)
        write_private(
            self.parents_record,
            json.dumps([asdict(p) for p in [*live, parent] if p.key != key or p is parent]) + "\n",
        )
        return parent

    def retire(self, workers: list[PoolWorker]) -> None:
        """Ask `workers` for RQ's warm shutdown (each finishes the job in hand, then exits);
        they stay recorded until they are gone, so `stop` can still reach them."""
        for worker in workers:
            _signal(worker.pid, signal.SIGTERM)  # once: a second SIGTERM is RQ's cold stop
        pids = {w.pid for w in workers}
        self._write([replace(w, retiring=True) if w.pid in pids else w for w in self.live()])

    def stop(self, timeout_s: float = STOP_TIMEOUT_S, redis_url: str | None = None) -> list[int]:
        """SIGTERM every live recorded worker (only those of `redis_url`, if given: RQ's warm
        shutdown), SIGKILL those still there after `timeout_s`, forget them; the pids that were
        running."""
        everyone = self.live()
        running = [
            w for w in everyone if redis_url is None or w.redis_id == redis_identity(redis_url)
        ]
        for worker in running:
            _signal(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(w.alive() for w in running):
            time.sleep(0.05)  # another session's children: there is no wait() on them
        for worker in running:
            if worker.alive():
                _signal(worker.pid, signal.SIGKILL)
        stopped = {w.pid for w in running}
        remaining = [w for w in everyone if w.pid not in stopped]
        if remaining:
            self._write(remaining)
        else:
            self.record.unlink(missing_ok=True)
            self.stop_parents(timeout_s)
        return sorted(stopped)

    def stop_parents(self, timeout_s: float = STOP_TIMEOUT_S) -> list[int]:
        """SIGTERM every live recorded parent (they have no worker left to cut short), SIGKILL
        those still there after `timeout_s`, forget them; the pids that were running."""
        running = self.parents()
        for parent in running:
            _signal(parent.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.alive() for p in running):
            time.sleep(0.05)  # another session's children: there is no wait() on them
        for parent in running:
            if parent.alive():
                _signal(parent.pid, signal.SIGKILL)
        for parent in self._recorded_parents():  # a killed one left its socket behind
            if not parent.alive():
                remove_socket_dir(parent.socket)
        self.parents_record.unlink(missing_ok=True)
        return sorted(p.pid for p in running)

    def _write(self, workers: list[PoolWorker]) -> None:
        write_private(self.record, json.dumps([asdict(w) for w in workers]) + "\n")


def _signal(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)
