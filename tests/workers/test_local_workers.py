"""`teamctl run --workers N` owns its workers: they stop with it, even when it is terminated."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.fork_server_client import UNKNOWN_EXIT
from teamctl.shared.process.parent_watch import PARENT_PID_ENV, watch_parent
from teamctl.shared.process.pids import pid_alive
from teamctl.shared.runs.store import RunStore

from tests.support.waiting import wait_until
from tests.support.workers import exited, parent_pid

# The run's own preloaded parent forks them, as teamctl does by default: the watch that stops
# them is the run's parent watching the run, and each worker watching that parent.
pytestmark = pytest.mark.default_workers


def start_waiting_run(
    redis_server: str, run_id: str, tmp_path: Path, workers: int
) -> tuple[subprocess.Popen[bytes], str]:
    """`teamctl run` with its own worker queue, held waiting for plan approval; and that queue."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    team = tmp_path / "team.toml"
    team.write_text(
        f'[[members]]\nid = "m1"\nqueue = "{queue}"\n[options]\nrequire_plan_approval = true\n'
    )
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from teamctl.coordinator.cli import main; main()",
            "run",
            "objective",
            "--team",
            str(team),
            "--redis-url",
            redis_server,
            "--workers",
            str(workers),
            "--run-id",
            run_id,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return run, queue


def worker_pids(conn: redis.Redis, run_id: str, queue: str, count: int) -> list[int]:
    """Once the run waits for approval with `count` workers registered: their pids."""
    wait_until(
        lambda: (
            RunStore(conn, RunKeys(run_id)).exists()
            and RunStore(conn, RunKeys(run_id)).state().status == "awaiting_approval"
        ),
        90,
        message="the run to wait for approval",
    )
    names = wait_until(
        lambda: (
            len(conn.smembers(f"rq:workers:{queue}")) >= count
            and conn.smembers(f"rq:workers:{queue}")
        ),
        60,
        message="the run's workers to register",
    )
    # The registry holds worker keys (rq:worker:<name>), each a hash with the pid.
    pids = [int(conn.hget(key, "pid")) for key in names]
    assert len(pids) == count and all(pid_alive(pid) for pid in pids)
    return pids


def test_sigterm_stops_the_run_and_its_workers(
    redis_server: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run, queue = start_waiting_run(redis_server, run_id, tmp_path, workers=1)
    try:
        pids = worker_pids(conn, run_id, queue, 1)

        run.send_signal(signal.SIGTERM)

        assert run.wait(timeout=60) == 128 + signal.SIGTERM
        wait_until(
            lambda: not any(pid_alive(pid) for pid in pids), 30, message="the run's workers to stop"
        )
    finally:
        # If the test failed early: SIGTERM first, so the run's workers stop too.
        stop_process(run, timeout_s=30)


def test_kill_9_of_the_run_stops_its_workers(
    redis_server: str, run_id: str, tmp_path: Path
) -> None:
    """Nobody can clean up after a SIGKILL: the workers notice they were orphaned and stop."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run, queue = start_waiting_run(redis_server, run_id, tmp_path, workers=2)
    pids: list[int] = []
    try:
        pids = worker_pids(conn, run_id, queue, 2)
        # Forked by one preloaded parent of the run's, which the run started.
        (parent,) = {parent_pid(pid) for pid in pids}
        assert parent_pid(parent) == run.pid
        assert all(b"rq.cli\0worker\0" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in pids)

        run.kill()

        assert run.wait(timeout=30) == -signal.SIGKILL
        wait_until(
            lambda: all(exited(pid) for pid in [*pids, parent]),
            30,
            message="the orphaned parent and workers to stop",
        )
        # A warm shutdown: each worker took itself out of RQ's registry on the way.
        assert conn.smembers(f"rq:workers:{queue}") == set()
    finally:
        stop_process(run, timeout_s=30)
        for pid in pids:
            if not exited(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_run_whose_preloaded_parent_was_killed_still_stops_its_workers(
    redis_server: str, tmp_path: Path
) -> None:
    """Its workers, orphaned, stop by themselves; the run, which can no longer ask the parent
    how they ended, still returns from stopping them."""
    queue = f"q-{uuid.uuid4().hex[:8]}"
    group = LocalWorkers(redis_server, [queue], 1, tmp_path / "logs")
    group.start()
    try:
        assert group.parent is not None
        (worker,) = group.processes
        conn = redis.Redis.from_url(redis_server, decode_responses=True)
        wait_until(
            lambda: conn.smembers(f"rq:workers:{queue}"), 120, message="the worker to register"
        )

        # Its command names its socket: python -m teamctl.worker.fork_server SOCKET ...
        socket_path = Path(
            os.fsdecode(Path(f"/proc/{group.parent.pid}/cmdline").read_bytes().split(b"\0")[3])
        )
        group.parent.kill()
        group.parent.wait(timeout=30)
        assert socket_path.exists()  # killed: it could not remove it

        wait_until(lambda: exited(worker.pid), 30, message="the orphaned worker to stop")
        assert worker.poll() == UNKNOWN_EXIT
    finally:
        group.stop()
    assert group.processes == [] and group.parent is None
    assert not socket_path.parent.exists()


def test_a_worker_started_by_hand_has_no_parent_to_watch() -> None:
    assert watch_parent({}) is None
    # A variable inherited from some other process than the parent arms nothing either.
    assert watch_parent({PARENT_PID_ENV: str(os.getpid())}) is None
    assert watch_parent({PARENT_PID_ENV: "not a pid"}) is None


def test_the_worker_class_named_for_rq_is_teamctls() -> None:
    """The coordinator names the class without importing the worker package: the name must
    still be the class's."""
    from teamctl.shared.redis.connection import WORKER_CLASS
    from teamctl.worker.warm_fork import WarmForkWorker

    module, _, name = WORKER_CLASS.rpartition(".")
    assert getattr(importlib.import_module(module), name) is WarmForkWorker
