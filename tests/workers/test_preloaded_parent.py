"""The preloaded parent teamctl forks its local workers from by default: the pool's is recorded,
listed through its workers and stopped by pid with them; a forked worker shows its own command
and runs with the environment it was asked for, never with what only the parent had."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from rq.job import Job
from teamctl.coordinator.local_workers.pool import WorkerPool
from teamctl.coordinator.local_workers.preloaded_parent import parent_env, start_parent
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process, worker_env
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV, spawn
from teamctl.shared.redis.embedded import EmbeddedRedis

from tests.support.waiting import wait_until
from tests.support.workers import exited, parent_pid

pytestmark = pytest.mark.default_workers
POOL_COMMAND = b"\0".join([b"-m", b"rq.cli", b"worker", b"--max-idle-time", b"600", b"members"])


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The test's state dir; its pool and its embedded Redis are stopped by pid at the end."""
    root = tmp_path / "state"
    yield root
    WorkerPool(root / "pool", root / "logs").stop()
    EmbeddedRedis(root / "redis").stop()


def teamctl(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, as a user runs it (its pool outlives it)."""
    return subprocess.run(
        [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def listed_pids() -> set[int]:
    """The pids `teamctl workers --json` lists."""
    listed = teamctl("workers", "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["pid"] for row in json.loads(listed.stdout)}


def test_the_pool_is_forked_from_one_parent_that_workers_stop_stops_too(state: Path) -> None:
    started = teamctl("workers", "start", "-n", "2")
    assert started.returncode == 0, started.stderr
    pool = WorkerPool(state / "pool", state / "logs")
    pids = {w.pid for w in pool.live()}
    (parent,) = pool.parents()
    assert len(pids) == 2 and {parent_pid(pid) for pid in pids} == {parent.pid}
    # `ps` shows each worker's own command, not the parent's, once it set it after the fork.
    wait_until(
        lambda: all(POOL_COMMAND in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids),
        10,
        message="the forked workers to show their command",
    )
    assert b"teamctl.worker.fork_server" in Path(f"/proc/{parent.pid}/cmdline").read_bytes()

    wait_until(lambda: pids <= listed_pids(), 120, message="the pool's workers to register")
    lines = teamctl("workers").stdout.splitlines()  # piped: tab-separated, no header
    assert (
        len(lines) == 2 and {int(line.split("\t")[1].rpartition(":")[2]) for line in lines} == pids
    )
    url = EmbeddedRedis(state / "redis").ensure()
    info = subprocess.run(
        [sys.executable, "-m", "rq.cli", "info", "-W", "-u", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert all(f" {pid}): idle members" in info for pid in pids), info

    stopped = teamctl("workers", "stop")
    assert stopped.returncode == 0 and stopped.stdout == "stopped 2 pool workers\n"
    wait_until(
        lambda: all(exited(pid) for pid in [*pids, parent.pid]),
        30,
        message="the pool and its parent to exit",
    )
    assert not pool.parents_record.exists() and not Path(parent.socket).parent.exists()
    assert teamctl("workers", "stop").stdout == "no pool workers running\n"


def test_the_parent_keeps_no_credential_of_the_environment_that_starts_it() -> None:
    environ = {
        "PATH": "/usr/bin",
        "PYTHONPATH": "libs",
        "LC_ALL": "C.UTF-8",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENAI_API_KEY": "sk-only-the-request-has-it",
        "REDIS_URL": "redis://:secret@127.0.0.1:6379/0",
        "HTTPS_PROXY": "http://user:secret@proxy:3128",
        "TEAMCTL_HEARTBEAT_TTL_S": "5",
    }
    assert parent_env(environ, "/project") == {
        "PATH": "/usr/bin",
        "PYTHONPATH": "/project/libs",
        "LC_ALL": "C.UTF-8",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def test_a_forked_worker_runs_with_the_requested_environment_only(
    redis_server: str, tmp_path: Path
) -> None:
    queue_name = f"q-{uuid.uuid4().hex[:8]}"
    parent_only = {"LC_PARENT_ONLY": "parent", "OPENAI_API_KEY": "sk-parent-only-0123"}
    process, parent = start_parent(
        {**os.environ, **parent_only}, tmp_path / "parent.log", linger_s=60
    )
    requested = worker_env({**os.environ, "FORKED_MARK": "given"}, redis_server)
    try:
        with (tmp_path / "worker.log").open("ab") as log:
            worker = spawn(parent.socket, ["worker", queue_name], requested, log.fileno())
        queue = Queue(queue_name, connection=redis.Redis.from_url(redis_server))
        wait_until(
            lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)},
            120,
            message="the forked worker to register",
        )
        values = {
            name: run_job(queue, "os.getenv", name)
            for name in ("FORKED_MARK", "LC_PARENT_ONLY", "OPENAI_API_KEY")
        }
        assert values == {"FORKED_MARK": "given", "LC_PARENT_ONLY": None, "OPENAI_API_KEY": None}
        worker.terminate()
        assert worker.wait(timeout=60) == 0
    finally:
        stop_process(process, timeout_s=30)
    assert exited(worker.pid)


def run_job(queue: Queue, function: str, *args: str) -> object:
    job = queue.enqueue(function, *args)
    wait_until(
        lambda: Job.fetch(job.id, connection=queue.connection).get_status() == "finished",
        60,
        message=f"{function} to finish",
    )
    return Job.fetch(job.id, connection=queue.connection).return_value()


LOADED_MODULE = """import os
import sys


def loaded(*names: str) -> tuple[list[bool], int]:
    return [name in sys.modules for name in names], os.getpriority(os.PRIO_PROCESS, 0)
"""
"""A job module: whether the work-horse running it (a fork of its worker) has each of `names`
imported, and its niceness."""
PRELOADED = ("litellm", "mcp", "teamctl.worker.teams.turn")


def test_a_runs_first_worker_is_forked_before_the_preload_of_what_planning_does_not_use(
    redis_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked for early while the parent preloads, a worker is forked once litellm is ready and
    serves its first job without the MCP SDK or the turn job (a job imports them if it needs
    them) and at the priority it started with (a cold run waits on that job), then imports them
    itself while that job runs and lowers its priority: its later jobs have them, as every job
    of a worker asked for after the preload has."""
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "loaded_mod.py").write_text(LOADED_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "libs"))
    process, parent = start_parent(os.environ, tmp_path / "parent.log", linger_s=60)
    first, second = f"q-{uuid.uuid4().hex[:8]}", f"q-{uuid.uuid4().hex[:8]}"
    try:
        with (tmp_path / "worker.log").open("ab") as log:
            env = worker_env(os.environ, redis_server)
            early = spawn(parent.socket, ["worker", first], env, log.fileno(), early=True)
            later = spawn(parent.socket, ["worker", second], env, log.fileno())
        conn = redis.Redis.from_url(redis_server)
        loaded = {}
        for worker, name in ((early, first), (later, second)):
            queue = Queue(name, connection=conn)
            wait_until(
                lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)},  # noqa: B023
                120,
                message="the forked worker to register",
            )
            loaded[name] = [run_job(queue, "loaded_mod.loaded", *PRELOADED) for _ in range(3)]
            assert run_job(queue, "os.getenv", "TEAMCTL_PRELOAD_DEFERRED") is None
        start, lowered = (
            os.getpriority(os.PRIO_PROCESS, 0),
            max(10, os.getpriority(os.PRIO_PROCESS, 0)),
        )
        assert loaded == {
            first: [
                ([True, False, False], start),
                ([True, True, True], lowered),
                ([True, True, True], lowered),
            ],
            second: [([True, True, True], lowered)] * 3,
        }
        assert {parent_pid(early.pid), parent_pid(later.pid)} == {process.pid}
    finally:
        stop_process(process, timeout_s=30)
    assert exited(early.pid) and exited(later.pid)


def test_a_runs_first_worker_of_another_class_is_forked_after_the_whole_preload(
    redis_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only teamctl's worker classes finish a preload their worker started without: with a
    class the person chose (SimpleWorker runs its jobs in its own process), the run's first
    worker waits for the whole preload, and lowers its priority at once."""
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "loaded_mod.py").write_text(LOADED_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "libs"))
    monkeypatch.setenv("RQ_WORKER_CLASS", "rq.worker.SimpleWorker")
    monkeypatch.delenv(FORK_SERVER_ENV, raising=False)  # the run's own preloaded parent
    name = f"q-{uuid.uuid4().hex[:8]}"
    group = LocalWorkers(redis_server, [name], 1, tmp_path / "logs", planner_first=True)
    group.start()
    try:
        (worker,) = group.processes
        queue = Queue(name, connection=redis.Redis.from_url(redis_server))
        wait_until(
            lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)},
            120,
            message="the forked worker to register",
        )

        loaded = run_job(queue, "loaded_mod.loaded", *PRELOADED)
    finally:
        group.stop()

    assert loaded == ([True, True, True], max(10, os.getpriority(os.PRIO_PROCESS, 0)))
