"""Claims race across processes: 8 claimers, 200 ready tasks, each claimed exactly once."""

from __future__ import annotations

import multiprocessing
import random
from collections import Counter
from multiprocessing.synchronize import Barrier

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskStatus

from tests.support.runs import token_number

CLAIMERS = 8
TASKS = 200


def _claim_everything(
    redis_url: str, run_id: str, seed: int, start: Barrier, results: multiprocessing.Queue
) -> None:
    """Child process: try to claim every task, in its own random order, once the race starts."""
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    ids = [f"t{i}" for i in range(TASKS)]
    random.Random(seed).shuffle(ids)
    start.wait(timeout=60)
    won = []
    for task_id in ids:
        token = board.claim(task_id, f"m{seed}", f"claimer:{seed}", 60)
        if token is not None:
            won.append((task_id, token))
    results.put((seed, won))


def test_eight_processes_claim_each_of_200_tasks_exactly_once(
    conn: redis.Redis, redis_url: str, run_id: str
) -> None:
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([TaskSpec(id=f"t{i}", member_id="m", task="x") for i in range(TASKS)])
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(CLAIMERS), ctx.Queue()
    claimers = [
        ctx.Process(target=_claim_everything, args=(redis_url, run_id, seed, start, results))
        for seed in range(CLAIMERS)
    ]
    try:
        for process in claimers:
            process.start()
        wins = dict(results.get(timeout=120) for _ in claimers)
    finally:
        for process in claimers:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)

    claimed = [task_id for won in wins.values() for task_id, _token in won]
    tokens = [token for won in wins.values() for _task_id, token in won]
    assert sorted(claimed) == sorted(f"t{i}" for i in range(TASKS))
    assert len(set(tokens)) == TASKS
    assert sorted(map(token_number, tokens)) == list(range(1, TASKS + 1))
    assert [p.exitcode for p in claimers] == [0] * CLAIMERS
    states = board.snapshot()
    assert Counter(s.status for s in states) == {TaskStatus.IN_PROGRESS: TASKS}
    assert all(s.attempts == 1 for s in states)
    owner = {task_id: seed for seed, won in wins.items() for task_id, _token in won}
    assert all(s.worker == f"claimer:{owner[s.task_id]}" for s in states)
    assert board.counts() == {TaskStatus.IN_PROGRESS: TASKS}
    assert board.next_ready(TASKS) == []
    assert conn.scard(board.keys.running) == TASKS
