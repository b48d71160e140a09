"""Workers that die or freeze mid-task: the claim expires, the coordinator reclaims the task,
another worker completes it exactly once, and a frozen worker's late write is refused.

This module starts three workers of its own on a queue of its own, so the session's workers never
see these jobs: the first test kills one, the second freezes one, and a spare always remains.
Processes are signalled by pid, and anything stopped is continued in `finally`.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskStatus

from tests.support.llm import ScriptedLLM
from tests.support.timescale import scaled
from tests.support.waiting import wait_until
from tests.support.workers import job_and_worker_pids, workers_on_own_queue

TTL_S = scaled(RunOptions().heartbeat_ttl_s, floor_s=1.5)
PLAN = {"tasks": [{"id": "work", "memberId": "m1", "task": "Do the work"}]}


@pytest.fixture(scope="module")
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def own_workers(
    redis_server: str, queue: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalWorkers]:
    with workers_on_own_queue(
        redis_server, queue, 3, tmp_path_factory.mktemp("kill-logs")
    ) as group:
        yield group


def _workers_on(redis_url: str, queue: str) -> list[dict[str, str]]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    rows = [client.hgetall(key) for key in client.smembers(f"rq:workers:{queue}")]
    return [row for row in rows if row]


class BlockingFirstCall:
    """The member model: the first call waits until the test says so, later calls answer."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls == 1:
            self.release.wait(30)
            return "late answer from the first worker"
        return "rescued answer"


def run_in_thread(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    queue: str,
    tmp_path: Path,
    member: BlockingFirstCall,
) -> tuple[threading.Thread, list[Result]]:
    """`teamctl run --workers 0` (the coordinator, with its reclaiming round loop) in a thread."""
    team = tmp_path / "team.toml"
    team.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script(f"plan-{run_id}", [json.dumps(PLAN)])}", '
                f'queue = "{queue}" }}',
                f'synthesizer = {{ model = "{llm.script(f"synth-{run_id}", ["final"])}", '
                f'queue = "{queue}" }}',
                "[[members]]",
                'id = "m1"',
                f'queue = "{queue}"',
                f'model = "{llm.script(f"m1-{run_id}", handler=member)}"',
                "[options]",
                f"heartbeat_ttl_s = {TTL_S}",
            ]
        )
        + "\n"
    )
    results: list[Result] = []
    thread = threading.Thread(
        target=lambda: results.append(
            CliRunner().invoke(
                main,
                [
                    "run",
                    "Survive a crash",
                    "--team",
                    str(team),
                    "--api-base",
                    llm.api_base,
                    "--redis-url",
                    redis_url,
                    "--workers",
                    "0",
                    "--run-id",
                    run_id,
                    "--json",
                ],
            )
        )
    )
    thread.start()
    return thread, results


def holder_pids(board: TaskBoard) -> tuple[int, int]:
    """The pid of the job process holding the claim, and of its rq worker (its parent)."""
    return job_and_worker_pids(board.get("work").worker or "")


def completions(conn: redis.Redis, board: TaskBoard, run_id: str) -> tuple[int, int]:
    """task.result messages and `completed` events for the task."""
    results = [m for m in MessageBus(conn, RunKeys(run_id)).messages() if m.type == "task.result"]
    events = [
        f
        for _id, f in conn.xrange(board.keys.events)
        if f.get("task_id") == "work" and f.get("status") == "completed"
    ]
    return len(results), len(events)


@pytest.mark.realistic
def test_sigkilled_worker_task_is_reclaimed_and_completed_once_elsewhere(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    member = BlockingFirstCall()
    thread, results = run_in_thread(llm, redis_server, run_id, queue, tmp_path, member)
    try:
        wait_until(lambda: member.calls == 1, 60, message="the first model call")
        horse, parent = holder_pids(board)
        assert parent in [p.pid for p in own_workers.processes if p.poll() is None]
        os.kill(parent, signal.SIGKILL)
        os.kill(horse, signal.SIGKILL)
    finally:
        member.release.set()
    thread.join(60 + 2 * TTL_S)

    assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
    task = board.get("work")
    assert (task.status, task.output, task.attempts) == (TaskStatus.COMPLETED, "rescued answer", 2)
    assert task.worker != f"{os.uname().nodename}:{horse}"
    assert completions(conn, board, run_id) == (1, 1)
    assert member.calls == 2


def test_frozen_worker_late_write_is_refused_and_counted(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    queue: str,
    own_workers: LocalWorkers,
    tmp_path: Path,
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    member = BlockingFirstCall()
    thread, results = run_in_thread(llm, redis_server, run_id, queue, tmp_path, member)
    horse = parent = 0
    try:
        wait_until(lambda: member.calls == 1, 60, message="the first model call")
        horse, parent = holder_pids(board)
        os.kill(horse, signal.SIGSTOP)
        # Its reply waits in the socket of a frozen process, past the heartbeat TTL.
        member.release.set()
        thread.join(60)
        assert not thread.is_alive() and results[0].exit_code == 0, results[0].output
        assert board.get("work").output == "rescued answer"
    finally:
        member.release.set()
        if horse:
            os.kill(horse, signal.SIGCONT)
    # The frozen job wakes up, gets its late answer and tries to complete with its old token.
    wait_until(
        lambda: _state_of(redis_server, queue, parent) == "idle",
        30,
        message="the frozen worker to finish its job",
    )
    task = board.get("work")
    assert (task.status, task.output, task.attempts) == (TaskStatus.COMPLETED, "rescued answer", 2)
    assert task.stale_writes >= 1
    assert completions(conn, board, run_id) == (1, 1)


def _state_of(redis_url: str, queue: str, pid: int) -> str | None:
    return next(
        (row.get("state") for row in _workers_on(redis_url, queue) if row.get("pid") == str(pid)),
        None,
    )
