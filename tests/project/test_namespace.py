"""teamctl installs as one `teamctl` namespace, so it works from a user's project that has its own
`worker.py`, `shared/` and `coordinator.py` (RQ puts the current directory first on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import redis
from rq import Queue, Worker
from teamctl.coordinator.local_workers.processes import stop_process, worker_env

from tests.support.waiting import wait_until

BIN = Path(sys.executable).parent
TRAP = 'raise ImportError("teamctl imported the user\'s {name}")\n'


def user_project(root: Path, queue: str) -> Path:
    """A project whose own modules shadow the old top-level names, and fail if imported."""
    root.mkdir()
    (root / "worker.py").write_text(TRAP.format(name="worker.py"))
    (root / "coordinator.py").write_text(TRAP.format(name="coordinator.py"))
    (root / "shared").mkdir()
    (root / "shared" / "__init__.py").write_text(TRAP.format(name="shared/"))
    # Every job of the run goes to `queue`, so only the worker this test starts can take them.
    (root / "team.toml").write_text(
        f'[[members]]\nid = "m1"\nqueue = "{queue}"\n'
        f'[planner]\nqueue = "{queue}"\n'
        f'[synthesizer]\nqueue = "{queue}"\n'
    )
    return root


def teamctl_run(project: Path, redis_server: str, run_id: str, workers: int) -> dict:
    done = subprocess.run(
        [
            str(BIN / "teamctl"),
            "run",
            "objective",
            "--team",
            "team.toml",
            "--json",
            "--redis-url",
            redis_server,
            "--workers",
            str(workers),
            "--run-id",
            run_id,
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_run_and_the_documented_worker_work_from_a_project_with_clashing_names(
    redis_server: str, tmp_path: Path
) -> None:
    queue = f"q-{uuid.uuid4().hex[:8]}"
    project = user_project(tmp_path / "project", queue)
    log = (tmp_path / "worker.log").open("wb")
    # The documented worker: plain `rq worker QUEUE`, configured by RQ_* variables.
    worker = subprocess.Popen(
        [str(BIN / "rq"), "worker", queue],
        cwd=project,
        env=worker_env(os.environ, redis_server),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: (
                worker.pid
                in {
                    w.pid
                    for w in Worker.all(
                        queue=Queue(queue, connection=redis.Redis.from_url(redis_server))
                    )
                }
            ),
            60,
            message="the documented worker to register",
        )
        by_hand = teamctl_run(project, redis_server, f"t-{uuid.uuid4().hex[:10]}", workers=0)
    finally:
        stop_process(worker)
    # And the workers `teamctl run` starts itself, from the same directory.
    local = teamctl_run(project, redis_server, f"t-{uuid.uuid4().hex[:10]}", workers=1)

    for result in (by_hand, local):
        assert [s["status"] for s in result["task_states"]] == ["completed"]
        assert result["output"]
    worker_log = (tmp_path / "worker.log").read_text()
    assert "imported the user's" not in worker_log and "not preloaded" not in worker_log
