"""A bare `rq worker QUEUE` (no preload module) still runs tasks, and says how to do better;
the documented preloaded worker says nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
from rq import Queue
from teamctl.shared.agent.offline_model import MODEL
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskStatus

from tests.support.runs import make_run


@pytest.mark.parametrize("preloaded", [False, True], ids=["bare", "preloaded"])
def test_bare_worker_completes_the_task_and_logs_the_preload_hint(
    redis_server: str, run_id: str, tmp_path: Path, preloaded: bool
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    make_run(
        conn,
        run_id,
        models={"m1": MODEL},
        tasks=[TaskSpec(id="t1", member_id="m1", task="Say hello")],
        workspace=tmp_path / "ws",
        api_base="http://127.0.0.1:9/v1",
    )
    queue = f"q-{uuid.uuid4().hex[:8]}"
    Queue(queue, connection=redis.Redis.from_url(redis_server)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, "t1", job_timeout=120
    )
    env = {k: v for k, v in os.environ.items() if k != "TEAMCTL_PRELOADED"}

    done = subprocess.run(  # --burst: the worker exits once the queue is empty
        [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "--burst",
            "-u",
            redis_server,
            *(["-c", "teamctl.worker.settings"] if preloaded else []),
            queue,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )

    assert done.returncode == 0, done.stderr
    task = TaskBoard(conn, RunKeys(run_id)).get("t1")
    assert (task.status, task.output) == (  # the offline model's answer for this task
        TaskStatus.COMPLETED,
        "[Member m1] t1: notes on 'Say hello' (offline demo model).",
    )
    log = done.stdout + done.stderr
    assert log.count("worker not preloaded") == (0 if preloaded else 1)
    assert ("RQ_CONFIG=teamctl.worker.settings rq worker members" in log) is not preloaded
