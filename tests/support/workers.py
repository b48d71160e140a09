"""Worker processes in tests: starting a group without the user's settings, and whether workers
or a process are done."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from rq.registry import FailedJobRegistry
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process, worker_command
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV
from teamctl.shared.process.pids import pid_alive

from tests.support.waiting import wait_until

ENV_PREFIXES = (
    "TEAMCTL_",
    "REDIS_URL",
    "OPENAI_",
    "ANTHROPIC_",
    "GEMINI_",
    "MISTRAL_",
    "GROQ_",
    "DEEPSEEK_",
    "OPENROUTER_",
)
"""The environment variables of a user's teamctl and provider settings, kept out of every test."""
TRACEBACK = b"Traceback (most recent call last)"


def user_setting(name: str) -> bool:
    """Whether `name` is a user's teamctl or provider setting, to keep out of a test; the fork
    server the suite starts is the suite's own and stays."""
    return name.startswith(ENV_PREFIXES) and name != FORK_SERVER_ENV


def parent_pid(pid: int) -> int:
    """The pid of process `pid`'s parent (Linux /proc)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[1])


def start_clean(group: LocalWorkers) -> None:
    """Start `group` without the user's teamctl and provider settings in its environment: a
    session or module fixture is built before the per-test clean_environ, and its workers
    would keep them for every test."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if user_setting(name):
                patch.delenv(name)
        group.start()


@contextmanager
def workers_on_own_queue(
    redis_url: str, queue: str, count: int, log_dir: Path
) -> Iterator[LocalWorkers]:
    """`count` workers of a module's own on `queue` (so the session's workers never see its
    jobs: a module may kill or freeze them), registered before it is yielded, stopped after."""
    group = LocalWorkers(redis_url, [queue], count, log_dir)
    start_clean(group)
    try:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
        wait_until(
            lambda: (
                len([k for k in client.smembers(f"rq:workers:{queue}") if client.exists(k)])
                == count
            ),
            60,
            message=f"{count} workers on queue {queue}",
        )
        yield group
    finally:
        group.stop()


def job_and_worker_pids(worker: str) -> tuple[int, int]:
    """The pid of the job process a task hash names (`worker`, host:pid), and of the rq
    worker that forked it (its parent): what a test kills to crash a worker mid-task."""
    horse = int(worker.rsplit(":", 1)[1])
    parent = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return horse, parent


def workers_idle(url: str) -> bool:
    """The shared workers' `members` queue is empty and none of its workers is busy."""
    queue = Queue("members", connection=redis.Redis.from_url(url))
    return queue.count == 0 and all(w.get_state() != "busy" for w in Worker.all(queue=queue))


def exited(pid: int) -> bool:
    """Gone, or a zombie (an orphan's exit that no init has reaped yet)."""
    if not pid_alive(pid):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:  # it exited meanwhile, or there is no /proc to ask
        return not pid_alive(pid)


@dataclass
class SharedWorkerTrail:
    """What a group of shared workers leaves when a job goes wrong: the failed jobs of its queue
    and the tracebacks in its logs, read from where the last test left off."""

    redis_url: str
    queue: str
    log_dir: Path
    log_offsets: dict[Path, int] = field(default_factory=dict)
    failed_seen: set[str] = field(default_factory=set)

    def mark(self) -> None:
        """Take everything so far as seen: a test answers only for what happens during it."""
        self.log_offsets = {path: path.stat().st_size for path in self.log_dir.glob("*.log")}
        self.failed_seen = set(self._failed_ids())

    def news(self) -> list[str]:
        """The failed jobs and worker tracebacks since the last mark, one line each."""
        found = [
            f"job {job_id} is in the FailedJobRegistry of {self.queue}"
            for job_id in self._failed_ids()
            if job_id not in self.failed_seen
        ]
        for path in sorted(self.log_dir.glob("*.log")):
            with path.open("rb") as log:
                log.seek(self.log_offsets.get(path, 0))
                text = log.read()
            if TRACEBACK in text:
                at = text.index(TRACEBACK)
                found.append(
                    f"{path.name} logged a traceback: "
                    + text[max(0, at - 300) : at + 1500].decode(errors="replace")
                )
        return found

    def _failed_ids(self) -> list[str]:
        client = redis.Redis.from_url(self.redis_url)
        try:
            return [
                job_id.decode() if isinstance(job_id, bytes) else job_id
                for job_id in FailedJobRegistry(self.queue, connection=client).get_job_ids()
            ]
        finally:
            client.close()


def wait_for_idle_queue(redis_url: str, queue_name: str) -> None:
    """Wait until `queue_name` holds no job and none of its workers is busy."""
    client = redis.Redis.from_url(redis_url)
    queue = Queue(queue_name, connection=client)
    wait_until(
        lambda: queue.count == 0 and all(w.get_state() != "busy" for w in Worker.all(queue=queue)),
        60,
        message=f"the shared workers of {queue_name} to be idle with nothing queued",
    )
    client.close()


SHARED_TRAILS = pytest.StashKey[dict[str, SharedWorkerTrail]]()


def keep_trail(config: pytest.Config, fixture: str, trail: SharedWorkerTrail) -> None:
    """Let the per-test check find the trail of the shared workers `fixture` started."""
    config.stash.setdefault(SHARED_TRAILS, {})[fixture] = trail


@contextmanager
def fork_server(directory: Path) -> Iterator[str]:
    """A preloaded fork server for the session's workers (worker/fork_server.py),
    started under a clean environment and stopped by pid; yields its socket."""
    socket_path = directory / "fork.sock"
    env = {name: value for name, value in os.environ.items() if not name.startswith(ENV_PREFIXES)}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    with (directory / "fork-server.log").open("ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "teamctl.worker.fork_server", str(socket_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        wait_until(
            lambda: socket_path.exists() or server.poll() is not None,
            120,
            message="the worker fork server to listen",
        )
        assert server.poll() is None, (directory / "fork-server.log").read_text()
        yield str(socket_path)
    finally:
        stop_process(server, timeout_s=30)


WARM_FORK = "teamctl.worker.warm_fork.WarmForkWorker"


@contextmanager
def warm_fork_worker(
    url: str, queue: str, log: Path, *, rq_options: tuple[str, ...] = ()
) -> Iterator[subprocess.Popen[bytes]]:
    """A preloaded WarmForkWorker on `queue`, registered; `rq_options` go to `rq worker`."""
    conn = redis.Redis.from_url(url)
    with log.open("ab") as out:
        process = subprocess.Popen(
            worker_command(url, [], worker_class=WARM_FORK) + [*rq_options, queue],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: process.pid in {w.pid for w in Worker.all(queue=Queue(queue, connection=conn))},
            60,
            message="the worker to register",
        )
        yield process
    finally:
        stop_process(process, timeout_s=30)


def spare_warmed(conn: redis.Redis) -> None:
    """Wait until a connection's last command is a PING: a spare's warm-up (on a server of the
    test's own: another worker's spare would do as well)."""
    wait_until(
        lambda: any(c["cmd"] == "ping" for c in conn.client_list()),
        30,
        message="the spare to warm up",
    )


def children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            except OSError:  # gone meanwhile
                continue
            if int(ppid) == pid and state != "Z":
                found.add(int(entry.name))
    return found


def reaped(pid: int) -> bool:
    """Process `pid` is gone, not even a zombie left."""
    return not Path(f"/proc/{pid}").exists()


def outage_seen_then_set(outage_s: float) -> float:
    """An RQ job: the outage bound of the client `job_connection` gives it, before it sets a
    run's own bound on that client, as a task does."""
    from teamctl.shared.redis.connection import outage_of, set_outage
    from teamctl.shared.settings import load_settings
    from teamctl.worker.jobs import job_connection

    conn = job_connection(load_settings())
    seen = outage_of(conn, default_s=-1.0)
    set_outage(conn, outage_s)
    return seen
