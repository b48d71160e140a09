"""The warm local pool: preloaded `rq worker` processes that outlive the `teamctl run` that
started them and serve the next one, like the embedded Redis; recorded by pid in the state dir,
stopped by pid, and exiting by themselves after `--idle-exit` seconds without a job."""

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

from teamctl.coordinator.local_workers.processes import STOP_TIMEOUT_S, start_worker, worker_env
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
        `environ` (whose digests are `digests`), and record them with the live ones."""
        private_dir(self.log_dir)
        env = worker_env(environ, redis_url)
        env.pop(PARENT_PID_ENV, None)  # a pool worker outlives whoever started it
        started = []
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for index in range(count):
            log_path = self.log_dir / f"pool-{stamp}-{os.getpid()}-{index}.log"
            with open(log_path, "ab", opener=private_opener) as log_file:
                process = start_worker(  # its own session: a Ctrl-C in the shell spares it
                    ["worker", "--max-idle-time", str(idle_exit_s), *queues],
                    env,
                    log_file,
                    new_session=True,
                )
            program = executable(process.pid)  # Popen returns once the exec is done
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
        return sorted(stopped)

    def _write(self, workers: list[PoolWorker]) -> None:
        write_private(self.record, json.dumps([asdict(w) for w in workers]) + "\n")


def _signal(pid: int, signum: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signum)
