"""`teamctl run --workers N` owns its workers: they stop with it, even when it is terminated."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.local_workers.early_parent import run_workers
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


def fork_servers() -> list[int]:
    """The pids of the fork servers (preloaded parents) running on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # not a process, or gone
            if b"teamctl.worker.fork_server" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def started_by(pid: int, run_pid: int) -> bool:
    """Whether process `pid` is a child of `run_pid` (False once it is gone)."""
    with contextlib.suppress(OSError):
        return parent_pid(pid) == run_pid
    return False


def started_for(pid: int, run_pid: int) -> bool:
    """Whether the fork server `pid` was started for the run `run_pid` (its environment says;
    readable while it preloads, before it hides it)."""
    with contextlib.suppress(OSError):
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return f"{PARENT_PID_ENV}={run_pid}".encode() in environ
    return False


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


def test_a_run_starts_its_parent_first_and_forks_its_workers_from_that_one(
    redis_server: str, run_id: str, tmp_path: Path
) -> None:
    """`run --workers N` starts the workers' preloaded parent before its own imports; the
    workers come from that parent, the only one the run started, logging where it always did."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run, queue = start_waiting_run(redis_server, run_id, tmp_path, workers=2)
    try:
        pids = worker_pids(conn, run_id, queue, 2)
        parents = [pid for pid in fork_servers() if started_by(pid, run.pid)]
        assert len(parents) == 1 and {parent_pid(pid) for pid in pids} == set(parents)
        logs = Path(os.environ["TEAMCTL_STATE_DIR"]) / "logs"
        assert (logs / f"parent-{run.pid}.log").read_text() == "ready\n"
    finally:
        stop_process(run, timeout_s=30)


def test_a_run_that_stops_before_its_workers_stops_the_parent_it_started(
    tmp_path: Path,
) -> None:
    """A configuration error after the parent started: the run exits 2 and stops it first."""
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from teamctl.coordinator.cli import main; main()",
            "run",
            "objective",
            "--team",
            str(tmp_path / "missing.toml"),
            "--workers",
            "2",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 2, stderr
    assert stderr.decode().startswith("teamctl: ") and len(stderr.splitlines()) == 1
    logs = Path(os.environ["TEAMCTL_STATE_DIR"]) / "logs"
    assert (logs / f"parent-{run.pid}.log").exists()  # it was started, then stopped
    assert [pid for pid in fork_servers() if started_for(pid, run.pid)] == []


@pytest.mark.parametrize(
    ("argv", "count"),
    [
        (["run", "goal", "--workers", "2"], 2),
        (["run", "--workers=3", "goal"], 3),
        (["run", "goal", "--workers", "0"], 0),
        (["run", "goal"], None),
        (["run", "goal", "--workers", "two"], None),
        (["run", "goal", "--workers", "2", "--help"], None),
        (["run", "--", "--workers", "2"], None),
        (["resume", "r1", "--workers", "2"], None),
        ([], None),
    ],
)
def test_the_workers_a_run_asks_for_are_read_from_the_command_line_as_typed(
    argv: list[str], count: int | None
) -> None:
    assert run_workers(argv) == count


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
