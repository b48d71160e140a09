"""A big board against a real redis-server: written and read in pages (no script call carries
more than a page; SLOWLOG sees none over 5 ms, bar a loaded host's noise), yet the same board one
call writes, the same tasks a one-by-one read gives, and one instant's view while tasks move."""

from __future__ import annotations

import json
import threading

import pytest
import redis
from teamctl.shared.board import (
    CREATE_PAGE_TASKS,
    SNAPSHOT_FIELDS_PAGE_TASKS,
    SNAPSHOT_PAGE_TASKS,
    TaskBoard,
)
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskState, TaskStatus

from tests.support.slowlog import (
    CountedScripts,
    first_within_the_rule,
    script_shas,
    slow_scripts_ms,
    slowlog_at_the_rule,
    within_the_rule,
)

TASKS = 2000
TTL_S = 30.0
LISTING_FIELDS = ("task_id", "status", "claimed_by", "attempts", "error", "model")
"""Some fields of each task, as a listing reads them."""


def board_of(conn: redis.Redis, run_id: str, specs: list[TaskSpec]) -> TaskBoard:
    board = TaskBoard(conn, RunKeys(run_id))
    assert board.create(specs) == len(specs)
    return board


def finish(board: TaskBoard, task_id: str, output: str) -> None:
    token = board.claim(task_id, "m1", "test:1", TTL_S)
    assert token is not None
    board.complete(task_id, token, output, 1)


def test_a_big_boards_snapshot_runs_no_script_over_5_ms_and_equals_its_hashes(
    conn: redis.Redis, run_id: str
) -> None:
    board = board_of(
        conn, run_id, [TaskSpec(id=f"t{i}", member_id="m1", task=f"do {i}") for i in range(TASKS)]
    )
    for i in range(0, TASKS, 4):  # outputs make some pages heavier than others
        finish(board, f"t{i}", f"output {i} " + "x" * 2000)
    scripts = CountedScripts(conn)
    states: list[TaskState] = []

    def measure() -> list[float]:
        with slowlog_at_the_rule(conn):
            states[:] = TaskBoard(conn, RunKeys(run_id), scripts).snapshot()
            return slow_scripts_ms(conn, script_shas("snapshot_page"))

    slow = first_within_the_rule(measure)
    assert within_the_rule(slow), slow
    # The events stream's key, then at most one page of task hashes.
    assert scripts.most_keys("snapshot_page") == 1 + SNAPSHOT_PAGE_TASKS
    one_by_one = [TaskState.from_hash(conn.hgetall(board.keys.task(f"t{i}"))) for i in range(TASKS)]
    assert states == one_by_one
    assert [s.status for s in states[:4]] == [
        TaskStatus.COMPLETED,
        TaskStatus.READY,
        TaskStatus.READY,
        TaskStatus.READY,
    ]


def test_a_snapshot_of_some_fields_reads_bigger_pages_no_script_over_5_ms(
    conn: redis.Redis, run_id: str
) -> None:
    board = board_of(
        conn, run_id, [TaskSpec(id=f"t{i}", member_id="m1", task=f"do {i}") for i in range(TASKS)]
    )
    for i in range(0, TASKS, 4):
        finish(board, f"t{i}", f"output {i} " + "x" * 2000)
    scripts = CountedScripts(conn)
    states: list[TaskState] = []

    def measure() -> list[float]:
        with slowlog_at_the_rule(conn):
            read = TaskBoard(conn, RunKeys(run_id), scripts).snapshot(LISTING_FIELDS)
            states[:] = read
            return slow_scripts_ms(conn, script_shas("snapshot_page"))

    slow = first_within_the_rule(measure)
    assert within_the_rule(slow), slow
    assert scripts.most_keys("snapshot_page") == 1 + SNAPSHOT_FIELDS_PAGE_TASKS
    wanted = (*LISTING_FIELDS, "dependents")  # a catch-up follows them
    one_by_one = [
        TaskState.from_hash(
            {f: v for f, v in conn.hgetall(board.keys.task(f"t{i}")).items() if f in wanted}
        )
        for i in range(TASKS)
    ]
    assert states == one_by_one
    assert states[0].status is TaskStatus.COMPLETED and states[0].output is None


def chain_is_consistent(states: list[TaskState]) -> bool:
    """A chain seen at one instant: completed tasks, then at most one ready or running, then
    pending ones."""
    order = [s.status for s in states]
    done = next((i for i, s in enumerate(order) if s is not TaskStatus.COMPLETED), len(order))
    rest = order[done + 1 :]
    return (
        done == len(order) or order[done] in (TaskStatus.READY, TaskStatus.IN_PROGRESS)
    ) and all(s is TaskStatus.PENDING for s in rest)


@pytest.mark.parametrize("fields", [(), LISTING_FIELDS], ids=["whole", "some fields"])
def test_a_snapshot_taken_while_a_chain_runs_sees_it_at_one_instant(
    conn: redis.Redis, run_id: str, fields: tuple[str, ...]
) -> None:
    specs = [
        TaskSpec(id=f"t{i}", member_id="m1", task="x", depends_on=[f"t{i - 1}"] if i else [])
        for i in range(TASKS)
    ]
    board_of(conn, run_id, specs)
    stop = threading.Event()

    def drive() -> None:
        driver = TaskBoard(redis.Redis(connection_pool=conn.connection_pool), RunKeys(run_id))
        for i in range(TASKS):
            if stop.is_set():
                return
            finish(driver, f"t{i}", "ok")

    thread = threading.Thread(target=drive)
    thread.start()
    seen = []
    try:
        while thread.is_alive() and len(seen) < 30:
            seen.append(TaskBoard(conn, RunKeys(run_id)).snapshot(fields))
    finally:
        stop.set()
        thread.join()
    assert len(seen) >= 3, "the chain ended before the snapshots could watch it move"
    assert [i for i, states in enumerate(seen) if not chain_is_consistent(states)] == []
    assert len({sum(s.status is TaskStatus.COMPLETED for s in states) for states in seen}) > 1


def tricky_plan(size: int) -> list[TaskSpec]:
    """Independent tasks, chains, a diamond, missing dependencies and what they block, one of
    them through a dependency later in plan order, repeated to `size` tasks."""
    specs = []
    for i in range(size):
        kind = i % 7
        deps = {
            0: [],
            1: [f"t{i - 1}"],
            2: [f"t{i - 2}", f"t{i - 1}"],
            3: [f"gone{i}"],
            4: [f"t{i - 1}"],
            5: [f"t{i + 1}"],
            6: [f"t{i - 6}", f"t{i - 3}"],
        }[kind]
        specs.append(
            TaskSpec(
                id=f"t{i}",
                member_id=f"m{i % 3}",
                task=f"do {i} — ünïcode",
                context="ctx" if kind == 2 else None,
                depends_on=[d for d in deps if d != f"t{size}"],
            )
        )
    return specs


def single_call_board(conn: redis.Redis, run_id: str, specs: list[TaskSpec]) -> TaskBoard:
    """The board create.lua makes of the whole plan in one call (the reference)."""
    board = TaskBoard(conn, RunKeys(run_id))
    k = board.keys
    payload = [
        json.dumps(
            {
                "task_id": t.id,
                "member_id": t.member_id or "",
                "task": t.task,
                "context": t.context or "",
                "depends_on": t.depends_on,
            }
        )
        for t in specs
    ]
    keys = [k.order, k.ready, k.counts, k.events, k.unanswered, *(k.task(t.id) for t in specs)]
    assert board.scripts["create"](keys=keys, args=payload) == len(specs)
    return board


def board_state(conn: redis.Redis, board: TaskBoard) -> tuple[object, ...]:
    """Everything a new board holds, creation times aside."""
    k = board.keys
    hashes = [
        {f: v for f, v in conn.hgetall(k.task(t)).items() if f not in ("updated_ms", "end_ms")}
        for t in conn.lrange(k.order, 0, -1)
    ]
    events = [fields for _, fields in conn.xrange(k.events)]
    return (
        conn.lrange(k.order, 0, -1),
        conn.zrange(k.ready, 0, -1, withscores=True),
        conn.zrange(k.unanswered, 0, -1, withscores=True),
        board.counts(),
        hashes,
        events,
    )


def test_a_big_plan_is_written_in_pages_as_one_call_would_write_it(
    conn: redis.Redis, run_id: str
) -> None:
    specs = tricky_plan(3 * CREATE_PAGE_TASKS + 50)
    scripts = CountedScripts(conn)
    boards: list[TaskBoard] = []

    def measure() -> list[float]:
        board = TaskBoard(conn, RunKeys(f"{run_id}-{len(boards)}"), scripts)  # a new one each
        boards.append(board)
        with slowlog_at_the_rule(conn):
            assert board.create(specs) == len(specs)
            return slow_scripts_ms(conn, script_shas("create", "create_page", "create_commit"))

    slow = first_within_the_rule(measure)
    paged = boards[-1]
    reference = single_call_board(conn, f"{run_id}-ref", specs)

    assert within_the_rule(slow), slow
    # The order list, then at most one page of task hashes; never the one-call create.
    assert scripts.most_keys("create_page") == 1 + CREATE_PAGE_TASKS
    assert scripts.most_keys("create") == 0
    assert board_state(conn, paged) == board_state(conn, reference)
    counts = paged.counts()
    assert counts[TaskStatus.BLOCKED] > 0 and counts[TaskStatus.PENDING] > 0
    assert conn.zcard(paged.keys.unanswered) == counts[TaskStatus.BLOCKED]
    assert state_of(paged, "t3").error == "missing dependency"
    assert state_of(paged, "t4").error == "dependency failed"
    with pytest.raises(redis.ResponseError, match="board already exists"):
        paged.create(specs)


def state_of(board: TaskBoard, task_id: str) -> TaskState:
    found = board.get(task_id)
    assert found is not None
    return found
