"""`teamctl run --workers N` owns its workers: they stop with it, even when it is terminated."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from pathlib import Path

import redis

from coordinator.workers import stop_process
from shared.embedded_redis import pid_alive
from shared.runstore import RunStore
from tests.conftest import wait_until


def test_sigterm_stops_the_run_and_its_workers(
        redis_server: str, run_id: str, tmp_path: Path) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    team = tmp_path / "team.toml"
    team.write_text(f'[[members]]\nid = "m1"\nqueue = "{queue}"\n'
                    "[options]\nrequire_plan_approval = true\n")
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run = subprocess.Popen(
        [sys.executable, "-c", "from coordinator.cli import main; main()", "run", "objective",
         "--team", str(team), "--redis-url", redis_server, "--workers", "1", "--run-id", run_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: RunStore(conn, run_id).exists()
                   and RunStore(conn, run_id).state().status == "awaiting_approval", 90,
                   message="the run to wait for approval")
        names = wait_until(lambda: conn.smembers(f"rq:workers:{queue}"), 60,
                           message="the run's worker to register")
        # The registry holds worker keys (rq:worker:<name>), each a hash with the pid.
        pids = [int(conn.hget(key, "pid")) for key in names]
        assert pids and all(pid_alive(pid) for pid in pids)

        run.send_signal(signal.SIGTERM)

        assert run.wait(timeout=60) == 128 + signal.SIGTERM
        wait_until(lambda: not any(pid_alive(pid) for pid in pids), 30,
                   message="the run's workers to stop")
    finally:
        # If the test failed early: SIGTERM first, so the run's workers stop too.
        stop_process(run, timeout_s=30)
