"""The board summary a status read uses (counts, the running set, the unanswered index and the
rows of the tasks that matter) agrees with a whole read of the board after every kind of move
the board's scripts make, on a real redis-server."""

from __future__ import annotations

from collections import Counter

import redis
from teamctl.shared.board import CREATE_PAGE_TASKS, TaskBoard, WriteOutcome
from teamctl.shared.board_summary import BoardSummary, read_summary
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskState, TaskStatus

from tests.support.waiting import wait_until

TTL_S = 30.0
ROWS = 2
"""Failed or blocked rows a summary holds in these tests: fewer than the board ends with."""
UNANSWERED = (TaskStatus.FAILED, TaskStatus.BLOCKED)


def spec(task_id: str, *deps: str, member: str = "m1") -> TaskSpec:
    return TaskSpec(id=task_id, member_id=member, task=f"do {task_id}", depends_on=list(deps))


def row(state: TaskState) -> tuple[object, ...]:
    """What a status row shows of a task (ROW_FIELDS)."""
    return (
        state.task_id,
        state.member_id,
        state.status,
        state.claimed_by,
        state.attempts,
        state.start_ms,
        state.end_ms,
        state.duration_ms,
        state.error,
        state.model,
        state.fallback_from,
        state.waiting_model,
        state.waiting_until_ms,
        state.usage,
    )


def agrees(conn: redis.Redis, board: TaskBoard, rows: int = ROWS) -> BoardSummary:
    """Assert the summary is what a whole read of the board says; return it."""
    summary = read_summary(board, rows)
    states = board.snapshot()
    unanswered = [s.task_id for s in states if s.status in UNANSWERED]
    assert summary.counts == dict(Counter(s.status for s in states))
    assert conn.zrange(board.keys.unanswered, 0, -1) == unanswered
    assert summary.unanswered == len(unanswered) and summary.indexed
    assert summary.total == len(states)
    matter = [
        s for s in states if s.status is TaskStatus.IN_PROGRESS or s.task_id in unanswered[:rows]
    ]
    assert [row(s) for s in summary.tasks] == [row(s) for s in matter]
    return summary


def expire_claim(conn: redis.Redis, board: TaskBoard, task_id: str) -> None:
    key = board.keys.heartbeat(task_id)
    conn.pexpire(key, 1)
    wait_until(lambda: not conn.exists(key), 5, message=f"heartbeat of {task_id} to expire")


def claim(board: TaskBoard, task_id: str, member: str = "m1") -> str:
    token = board.claim(task_id, member, "host:1", TTL_S)
    assert token is not None, task_id
    return token


def test_the_summary_agrees_with_the_board_after_every_kind_of_move(
    conn: redis.Redis, run_id: str
) -> None:
    board = TaskBoard(conn, RunKeys(run_id))
    plan = [
        spec("a"),
        spec("b", "a"),
        spec("c", "b"),
        spec("d"),
        spec("e", "d"),
        spec("f"),
        spec("g", "missing"),
        spec("h", "g"),
        spec("i"),
        spec("j"),
        spec("k", "j"),
    ]
    assert board.create(plan) == len(plan)
    summary = agrees(conn, board)  # g and h blocked at creation
    assert [s.task_id for s in summary.tasks] == ["g", "h"]

    a = claim(board, "a")
    assert board.heartbeat("a", a, TTL_S, visible=True) is WriteOutcome.APPLIED
    assert [s.task_id for s in agrees(conn, board).tasks] == ["a", "g", "h"]
    assert board.complete("a", a, "A done", 5) is WriteOutcome.APPLIED  # b ready
    agrees(conn, board)

    d = claim(board, "d")
    assert board.release("d", d, "not mine") is WriteOutcome.APPLIED
    agrees(conn, board)
    d = claim(board, "d")
    assert board.release_for_budget("d", d, "budget") is WriteOutcome.APPLIED
    agrees(conn, board)
    d = claim(board, "d")
    assert board.reassign("d", d, "m2") is WriteOutcome.APPLIED  # a handoff
    assert agrees(conn, board).tasks[0].claimed_by == "m2"
    assert board.fail("d", d, "d broke", 7) is WriteOutcome.APPLIED  # e blocked
    assert [s.task_id for s in agrees(conn, board, rows=10).tasks] == ["d", "e", "g", "h"]

    claim(board, "b")
    expire_claim(conn, board, "b")
    assert board.reclaim_expired(max_attempts=3) == ["b"]  # ready again
    agrees(conn, board)
    claim(board, "b")
    expire_claim(conn, board, "b")
    assert board.reclaim_expired(max_attempts=2) == ["b"]  # failed; c blocked
    agrees(conn, board)

    claim(board, "f")
    assert board.fail_in_progress("stopped") == ["f"]
    agrees(conn, board)
    assert board.fail("i", None, "unknown member") is WriteOutcome.APPLIED  # never claimed
    agrees(conn, board)
    assert board.block_stalled("cancelled") == 2  # j and k
    summary = agrees(conn, board, rows=20)
    assert summary.counts == {TaskStatus.COMPLETED: 1, TaskStatus.FAILED: 4, TaskStatus.BLOCKED: 6}
    assert [s.task_id for s in summary.tasks] == ["b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]


def test_a_big_plan_written_in_pages_indexes_its_blocked_tasks(
    conn: redis.Redis, run_id: str
) -> None:
    board = TaskBoard(conn, RunKeys(run_id))
    size = 3 * CREATE_PAGE_TASKS
    plan = [spec(f"t{i}", *(["gone"] if i % 50 == 7 else [])) for i in range(size)]
    plan.append(spec("last", "t7"))  # blocked by a blocked task
    assert board.create(plan) == size + 1
    summary = agrees(conn, board)
    assert summary.counts == {TaskStatus.READY: size - 6, TaskStatus.BLOCKED: 7}
    assert [s.task_id for s in summary.tasks] == ["t7", "t57"]
    token = claim(board, "t0")
    assert board.fail("t0", token, "broke") is WriteOutcome.APPLIED
    assert [s.task_id for s in agrees(conn, board).tasks] == ["t0", "t7"]


def test_a_board_without_the_index_says_so(conn: redis.Redis, run_id: str) -> None:
    """A board made before the index was kept has failures it does not list: a status read
    must read the whole board then."""
    board = TaskBoard(conn, RunKeys(run_id))
    board.create([spec("a"), spec("b", "a")])
    token = claim(board, "a")
    assert board.fail("a", token, "broke") is WriteOutcome.APPLIED
    conn.delete(board.keys.unanswered)
    summary = read_summary(board, ROWS)
    assert not summary.indexed
    assert summary.counts == {TaskStatus.FAILED: 1, TaskStatus.BLOCKED: 1}
