"""The task board against a real redis-server: AI4J board cases, fencing, reclaim, outcomes."""

from __future__ import annotations

import time

import pytest
import redis
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.bus import MessageBus
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskSpec, TaskState, TaskStatus

from tests.support.runs import next_token
from tests.support.waiting import assert_ttl_as_set, wait_until

TTL_S = 30.0


def spec(task_id: str, *deps: str, member: str = "m1") -> TaskSpec:
    return TaskSpec(id=task_id, member_id=member, task=f"do {task_id}", depends_on=list(deps))


def make_board(conn: redis.Redis, run_id: str, *tasks: TaskSpec) -> TaskBoard:
    board = TaskBoard(conn, RunKeys(run_id))
    assert board.create(list(tasks)) == len(tasks)
    return board


def state(board: TaskBoard, task_id: str) -> TaskState:
    found = board.get(task_id)
    assert found is not None
    return found


def view(board: TaskBoard, task_id: str) -> tuple[object, ...]:
    s = state(board, task_id)
    return (s.status, s.claimed_by, s.phase, s.detail, s.percent, s.error)


def expire_claim(conn: redis.Redis, board: TaskBoard, task_id: str) -> None:
    """Let the real TTL run out (1 ms) instead of deleting the key by hand."""
    key = board.keys.heartbeat(task_id)
    conn.pexpire(key, 1)
    wait_until(lambda: not conn.exists(key), 5, message=f"heartbeat of {task_id} to expire")


def test_claim_release_reassign_and_dependency_flow(conn: redis.Redis, run_id: str) -> None:
    """AI4J AgentTeamTaskBoardTest.test_claim_release_reassign_and_dependency_flow."""
    board = make_board(conn, run_id, spec("collect"), spec("format", "collect", member="m2"))
    assert board.next_ready(10) == ["collect"]
    assert view(board, "format") == (
        TaskStatus.PENDING,
        None,
        "pending",
        "Waiting for dependencies.",
        0,
        None,
    )

    token = board.claim("collect", "m1", "host:1", TTL_S)
    assert token is not None
    assert view(board, "collect") == (
        TaskStatus.IN_PROGRESS,
        "m1",
        "running",
        "Claimed by m1.",
        15,
        None,
    )
    assert board.reassign("collect", token, "m2") is WriteOutcome.APPLIED
    assert view(board, "collect") == (
        TaskStatus.IN_PROGRESS,
        "m2",
        "reassigned",
        "Reassigned from m1 to m2.",
        15,
        None,
    )
    assert board.release("collect", token, "handoff") is WriteOutcome.APPLIED
    assert view(board, "collect") == (
        TaskStatus.READY,
        None,
        "ready",
        "Ready for dispatch.",
        15,
        None,
    )
    assert state(board, "collect").requeue_reason == "handoff"

    token2 = board.claim("collect", "m2", "host:1", TTL_S)
    assert token2 == next_token(token)  # the run's next fencing token: the released one is dead
    assert board.heartbeat("collect", token2, TTL_S, visible=True) is WriteOutcome.APPLIED
    collect = state(board, "collect")
    assert (collect.phase, collect.detail, collect.heartbeat_count, collect.attempts) == (
        "heartbeat",
        "Heartbeat from m2.",
        1,
        2,
    )

    assert board.complete("collect", token2, "facts", 12) is WriteOutcome.APPLIED
    assert view(board, "collect") == (TaskStatus.COMPLETED, "m2", "completed", "facts", 100, None)
    assert view(board, "format") == (
        TaskStatus.READY,
        None,
        "ready",
        "Dependencies satisfied.",
        5,
        None,
    )
    token3 = board.claim("format", "m2", "host:1", TTL_S)
    assert token3 is not None
    assert board.complete("format", token3, "final", 8) is WriteOutcome.APPLIED
    assert not board.has_work_remaining()
    assert state(board, "format").status is TaskStatus.COMPLETED
    assert state(board, "format").duration_ms == 8
    assert board.counts()[TaskStatus.COMPLETED] == 2
    assert [s.stale_writes for s in board.snapshot()] == [0, 0]


def test_a_task_waiting_on_two_is_ready_only_once_both_are_completed(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b"), spec("c", "a", "b"))
    token_a = board.claim("a", "m1", "host:1", TTL_S)
    token_b = board.claim("b", "m1", "host:1", TTL_S)
    assert token_a is not None and token_b is not None
    assert board.complete("a", token_a, "one", 1) is WriteOutcome.APPLIED
    # One of its two dependencies done: still pending, not claimable, not handed out.
    assert state(board, "c").status is TaskStatus.PENDING
    assert board.claim("c", "m1", "host:1", TTL_S) is None
    assert board.next_ready(10) == []
    assert board.complete("b", token_b, "two", 1) is WriteOutcome.APPLIED
    assert view(board, "c") == (TaskStatus.READY, None, "ready", "Dependencies satisfied.", 5, None)
    assert board.next_ready(10) == ["c"]
    assert board.claim("c", "m1", "host:1", TTL_S) is not None


def test_recover_timed_out_claims(conn: redis.Redis, run_id: str) -> None:
    """AI4J test_recover_timed_out_claims: an expired heartbeat key sends the task back."""
    board = make_board(conn, run_id, spec("t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.reclaim_expired(3) == []  # the claim is alive
    expire_claim(conn, board, "t1")

    assert board.reclaim_expired(3) == ["t1"]
    t1 = state(board, "t1")
    assert (t1.status, t1.claimed_by, t1.phase, t1.token, t1.attempts) == (
        TaskStatus.READY,
        None,
        "ready",
        "0",
        1,
    )
    assert (t1.worker, t1.start_ms, t1.requeue_reason) == (None, 0, "claim expired")
    assert board.next_ready(5) == ["t1"]
    assert conn.smembers(board.keys.running) == set()
    # Only the reclaim marks a crash; the next claim keeps the mark for its attempt to read,
    # and a release (whatever its reason says) clears it.
    assert t1.reclaimed
    again = board.claim("t1", "m1", "host:2", TTL_S)
    assert again is not None and state(board, "t1").reclaimed
    assert board.release("t1", again, "claim expired") is WriteOutcome.APPLIED
    released = state(board, "t1")
    assert (released.requeue_reason, released.reclaimed) == ("claim expired", False)


def test_reclaim_fails_after_max_attempts_and_blocks_dependents(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b", "a"), spec("c", "b"), spec("d"))
    for attempt in (1, 2):
        assert board.claim("a", "m1", "host:1", TTL_S) is not None
        expire_claim(conn, board, "a")
        assert board.reclaim_expired(2, announce_failures=True) == ["a"]
        assert state(board, "a").attempts == attempt
    # Only the failure is announced, as the member's task.error would have been.
    [message] = MessageBus(conn, RunKeys(run_id)).messages()
    assert (message.from_, message.to, message.type, message.task_id, message.content) == (
        "m1",
        "lead",
        "task.error",
        "a",
        "claim expired after 2 attempts",
    )

    a = state(board, "a")
    assert (a.status, a.phase, a.detail, a.error, a.percent) == (
        TaskStatus.FAILED,
        "failed",
        "claim expired after 2 attempts",
        "claim expired after 2 attempts",
        100,
    )
    for dependent in ("b", "c"):
        assert view(board, dependent) == (
            TaskStatus.BLOCKED,
            None,
            "blocked",
            "Blocked: dependency failed.",
            100,
            "dependency failed",
        )
    assert state(board, "d").status is TaskStatus.READY
    assert board.counts()[TaskStatus.BLOCKED] == 2


def test_stale_holder_cannot_overwrite_the_result(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("t1"), spec("t2", "t1"))
    stale = board.claim("t1", "m1", "host:1", TTL_S)
    assert stale is not None
    expire_claim(conn, board, "t1")
    assert board.reclaim_expired(3) == ["t1"]
    fresh = board.claim("t1", "m2", "host:2", TTL_S)
    assert fresh == next_token(stale)
    assert board.complete("t1", fresh, "good", 5) is WriteOutcome.APPLIED

    assert board.complete("t1", stale, "bad", 9) is WriteOutcome.STALE
    t1 = state(board, "t1")
    assert (t1.status, t1.output, t1.claimed_by, t1.worker, t1.stale_writes) == (
        TaskStatus.COMPLETED,
        "good",
        "m2",
        "host:2",
        1,
    )
    assert state(board, "t2").status is TaskStatus.READY


def test_a_revoked_token_is_refused_by_every_write(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.release("t1", token) is WriteOutcome.APPLIED
    before = state(board, "t1")

    outcomes = [
        board.heartbeat("t1", token, TTL_S),
        board.complete("t1", token, "x", 1),
        board.fail("t1", token, "boom"),
        board.release("t1", token),
        board.reassign("t1", token, "m2"),
    ]
    assert outcomes == [WriteOutcome.STALE] * 5
    after = state(board, "t1")
    assert after.stale_writes == 5
    assert after.model_copy(update={"stale_writes": 0}) == before
    assert before.requeue_reason == "Released back to queue."


def test_reassign_keeps_the_token_valid_and_renews_the_heartbeat(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    conn.pexpire(board.keys.heartbeat("t1"), 1000)
    renewed_at = time.monotonic()
    assert board.reassign("t1", token, " m3 ") is WriteOutcome.APPLIED
    assert_ttl_as_set(conn, board.keys.heartbeat("t1"), TTL_S, renewed_at)  # the claim's TTL
    assert board.heartbeat("t1", token, TTL_S, visible=True) is WriteOutcome.APPLIED
    assert state(board, "t1").detail == "Heartbeat from m3."
    assert board.complete("t1", token, "done by the original worker", 3) is WriteOutcome.APPLIED
    t1 = state(board, "t1")
    assert (t1.status, t1.claimed_by, t1.heartbeat_count, t1.stale_writes) == (
        TaskStatus.COMPLETED,
        "m3",
        1,
        0,
    )
    with pytest.raises(ValueError, match="to_member_id is required"):
        board.reassign("t1", token, "  ")


def test_silent_heartbeat_keeps_the_claim_without_changing_the_view(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    before = state(board, "t1")
    conn.pexpire(board.keys.heartbeat("t1"), 1000)
    renewed_at = time.monotonic()
    assert board.heartbeat("t1", token, TTL_S) is WriteOutcome.APPLIED
    after = state(board, "t1")
    assert_ttl_as_set(conn, board.keys.heartbeat("t1"), TTL_S, renewed_at)
    assert (after.phase, after.detail, after.heartbeat_count) == (before.phase, before.detail, 0)


def test_outcomes_distinguish_conflict_and_missing_from_stale(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("t1"), spec("t2"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.fail("t1", None, "coordinator says no") is WriteOutcome.CONFLICT
    assert board.complete("t1", token, "once", 1) is WriteOutcome.APPLIED
    assert board.complete("t1", token, "twice", 1) is WriteOutcome.CONFLICT
    assert board.complete("nope", token, "x", 1) is WriteOutcome.NOT_FOUND
    assert board.release("研究", token) is WriteOutcome.NOT_FOUND
    assert board.fail("t2", None, "unknown team member: zed") is WriteOutcome.APPLIED
    assert state(board, "t1").output == "once"
    assert state(board, "t1").stale_writes == 0
    assert view(board, "t2") == (
        TaskStatus.FAILED,
        None,
        "failed",
        "unknown team member: zed",
        100,
        "unknown team member: zed",
    )
    assert not conn.exists(board.keys.task("nope"))


def test_claim_requires_ready_and_resolves_raw_ids(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("collect_facts"), spec("later", "collect_facts"))
    assert board.claim("later", "m1", "host:1", TTL_S) is None
    assert board.claim("missing", "m1", "host:1", TTL_S) is None
    token = board.claim("  Collect Facts ", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.claim("collect_facts", "m2", "host:2", TTL_S) is None
    assert state(board, "Collect Facts").claimed_by == "m1"
    assert state(board, "collect_facts").attempts == 1


def test_claim_without_member_uses_the_planned_member(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("t1", member="m7"), spec("t2", member=""))
    assert board.claim("t1", "", "host:1", TTL_S) is not None
    assert board.claim("t2", " ", "host:1", TTL_S) is not None
    assert view(board, "t1")[1:4] == ("m7", "running", "Claimed by m7.")
    assert view(board, "t2")[1:4] == (None, "running", "Claimed by member.")


def test_missing_dependency_blocks_at_creation_and_spreads(conn: redis.Redis, run_id: str) -> None:
    board = make_board(
        conn,
        run_id,
        spec("a", "ghost"),
        spec("b", "a"),
        spec("c", "b"),
        spec("d", "a", "ghost"),
        spec("e", "ghost", "a"),
        spec("f"),
    )
    missing = ("Blocked: missing dependency.", "missing dependency")
    failed = ("Blocked: dependency failed.", "dependency failed")
    expected = {"a": missing, "b": failed, "c": failed, "d": failed, "e": missing}
    for task_id, (detail, error) in expected.items():
        assert view(board, task_id) == (TaskStatus.BLOCKED, None, "blocked", detail, 100, error)
    assert board.next_ready(10) == ["f"]
    assert board.counts() == {TaskStatus.BLOCKED: 5, TaskStatus.READY: 1}


def test_missing_dependency_reason_follows_plan_order_as_ai4j(
    conn: redis.Redis, run_id: str
) -> None:
    """A dependent listed before its blocked dependency sees it still pending in the first pass."""
    board = make_board(conn, run_id, spec("early", "late", "ghost"), spec("late", "ghost"))
    assert state(board, "early").error == "missing dependency"
    assert state(board, "late").error == "missing dependency"


def test_failed_dependency_blocks_transitively(conn: redis.Redis, run_id: str) -> None:
    board = make_board(
        conn,
        run_id,
        spec("a"),
        spec("b", "a"),
        spec("c", "b"),
        spec("d", "a", "x"),
        spec("x"),
        spec("e", "c", "x"),
    )
    token = board.claim("a", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.fail("a", token, "  model exploded  ", 40) is WriteOutcome.APPLIED
    a = state(board, "a")
    assert (a.status, a.phase, a.detail, a.error, a.percent, a.duration_ms) == (
        TaskStatus.FAILED,
        "failed",
        "model exploded",
        "  model exploded  ",
        100,
        40,
    )
    for task_id in ("b", "c", "d", "e"):
        assert view(board, task_id) == (
            TaskStatus.BLOCKED,
            None,
            "blocked",
            "Blocked: dependency failed.",
            100,
            "dependency failed",
        )
    assert board.next_ready(10) == ["x"]
    assert board.has_work_remaining()


def test_cycle_is_blocked_by_block_stalled_but_in_progress_work_is_not(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("a", "b"), spec("b", "a"), spec("c"), spec("s", "s"))
    assert board.next_ready(10) == ["c"]
    token = board.claim("c", "m1", "host:1", TTL_S)
    assert token is not None
    reason = "unresolved dependencies or cyclic plan"
    assert board.block_stalled(reason) == 3
    for task_id in ("a", "b", "s"):
        assert view(board, task_id) == (TaskStatus.BLOCKED, None, "blocked", reason, 100, reason)
    assert state(board, "c").status is TaskStatus.IN_PROGRESS
    assert board.block_stalled("again") == 0
    assert board.complete("c", token, "done", 1) is WriteOutcome.APPLIED
    assert not board.has_work_remaining()


def test_max_rounds_reason_blocks_ready_and_pending(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b", "a"))
    assert board.block_stalled("max rounds exceeded: 1") == 2
    assert [(s.task_id, s.status, s.error) for s in board.snapshot()] == [
        ("a", TaskStatus.BLOCKED, "max rounds exceeded: 1"),
        ("b", TaskStatus.BLOCKED, "max rounds exceeded: 1"),
    ]
    assert board.next_ready(10) == []


def test_release_sends_a_task_back_in_plan_order(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b"), spec("c"))
    assert board.next_ready(0) == ["a"]
    token = board.claim("a", "m1", "host:1", TTL_S)
    assert token is not None
    assert board.heartbeat("a", token, TTL_S, visible=True) is WriteOutcome.APPLIED
    assert board.next_ready(10) == ["b", "c"]
    assert board.release("a", token, "  too big  ") is WriteOutcome.APPLIED
    assert board.next_ready(10) == ["a", "b", "c"]
    a = state(board, "a")
    assert (a.heartbeat_count, a.percent, a.requeue_reason, a.output) == (1, 15, "too big", None)
    assert not conn.exists(board.keys.heartbeat("a"))


def test_a_fresh_board_object_finds_dependents_without_the_cache(
    conn: redis.Redis, run_id: str
) -> None:
    make_board(conn, run_id, spec("a"), spec("b", "a"), spec("c", "a"), spec("d", "b", "c"))
    worker_side = TaskBoard(conn, RunKeys(run_id))
    token = worker_side.claim("a", "m1", "host:1", TTL_S)
    assert token is not None
    coordinator_side = TaskBoard(conn, RunKeys(run_id))
    assert coordinator_side.complete("a", token, "ok", 1) is WriteOutcome.APPLIED
    assert coordinator_side.next_ready(10) == ["b", "c"]
    b_token = worker_side.claim("b", "m1", "host:1", TTL_S)
    assert b_token is not None
    assert TaskBoard(conn, RunKeys(run_id)).fail("b", b_token, "no") is WriteOutcome.APPLIED
    assert state(worker_side, "d").error == "dependency failed"
    assert state(worker_side, "c").status is TaskStatus.READY
    assert state(worker_side, "a").dependents == ["b", "c"]


def test_snapshot_is_in_plan_order_and_create_refuses_a_second_plan(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("z"), spec("y", "z"), spec("x"))
    assert [s.task_id for s in TaskBoard(conn, RunKeys(run_id)).snapshot()] == ["z", "y", "x"]
    with pytest.raises(redis.ResponseError, match="board already exists"):
        board.create([spec("w")])
    assert board.task_ids() == ["z", "y", "x"]
    assert TaskBoard(conn, RunKeys("other-run")).snapshot() == []


def test_every_board_key_carries_the_run_hash_tag(conn: redis.Redis, run_id: str) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b", "a"))
    token = board.claim("a", "m1", "host:1", TTL_S)
    assert token is not None
    base = f"teamctl:run:{{{run_id}}}"
    assert sorted(conn.keys("*")) == sorted(
        [
            f"{base}:order",
            f"{base}:running",
            f"{base}:counts",  # ready is empty: gone
            f"{base}:tokens",
            f"{base}:events",
            f"{base}:task:a",
            f"{base}:task:b",
            f"{base}:hb:a",
        ]
    )
    events = [fields for _id, fields in conn.xrange(board.keys.events)]
    assert [(e["task_id"], e["status"]) for e in events] == [("", "created"), ("a", "in_progress")]


def test_a_late_heartbeat_before_reclaim_keeps_the_claim(conn: redis.Redis, run_id: str) -> None:
    """The TTL only marks a claim reclaimable; until the reclaim runs, the holder may renew it."""
    board = make_board(conn, run_id, spec("t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    expire_claim(conn, board, "t1")
    assert board.heartbeat("t1", token, TTL_S) is WriteOutcome.APPLIED
    assert board.reclaim_expired(3) == []
    t1 = state(board, "t1")
    assert (t1.status, t1.token, t1.attempts, t1.stale_writes) == (
        TaskStatus.IN_PROGRESS,
        token,
        1,
        0,
    )


def test_the_reclaim_script_refuses_a_claim_whose_heartbeat_was_renewed_after_the_scan(
    conn: redis.Redis, run_id: str
) -> None:
    """The Python scan picks expired claims, but a heartbeat may land between that scan and the
    script: the script's own check of the heartbeat key is what keeps the claim then."""
    board = make_board(conn, run_id, spec("t1"), spec("t2", "t1"))
    token = board.claim("t1", "m1", "host:1", TTL_S)
    assert token is not None
    # The scan's candidate list, as it stood before the renewal, handed to the script as is.
    assert board._reclaim(["t1"], 1, False, "") == []
    t1 = state(board, "t1")
    assert (t1.status, t1.token, t1.attempts, t1.error) == (TaskStatus.IN_PROGRESS, token, 1, None)
    assert state(board, "t2").status is TaskStatus.PENDING
    assert board.heartbeat("t1", token, TTL_S) is WriteOutcome.APPLIED


def test_release_of_a_task_with_dependencies_reads_dependencies_satisfied(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b", "a"))
    a_token = board.claim("a", "m1", "host:1", TTL_S)
    assert a_token is not None
    assert board.complete("a", a_token, "", 1) is WriteOutcome.APPLIED
    assert (state(board, "a").detail, state(board, "a").output) == ("Task completed.", None)
    b_token = board.claim("b", "m2", "host:1", TTL_S)
    assert b_token is not None
    assert board.release("b", b_token) is WriteOutcome.APPLIED
    assert view(board, "b") == (
        TaskStatus.READY,
        None,
        "ready",
        "Dependencies satisfied.",
        15,
        None,
    )
    assert board.counts() == {TaskStatus.COMPLETED: 1, TaskStatus.READY: 1}


def test_reclaim_handles_several_expired_claims_in_one_script(
    conn: redis.Redis, run_id: str
) -> None:
    board = make_board(conn, run_id, spec("a"), spec("b"), spec("c"), spec("d", "b"))
    tokens = {t: board.claim(t, "m1", "host:1", TTL_S) for t in ("a", "b", "c")}
    assert board.claim("b", "m1", "host:1", TTL_S) is None
    for task_id in ("a", "b"):
        expire_claim(conn, board, task_id)
    assert board.reclaim_expired(1) == ["a", "b"]
    assert [(s.task_id, s.status, s.error) for s in board.snapshot()] == [
        ("a", TaskStatus.FAILED, "claim expired after 1 attempts"),
        ("b", TaskStatus.FAILED, "claim expired after 1 attempts"),
        ("c", TaskStatus.IN_PROGRESS, None),
        ("d", TaskStatus.BLOCKED, "dependency failed"),
    ]
    assert board.complete("a", tokens["a"], "late", 1) is WriteOutcome.STALE
    assert conn.smembers(board.keys.running) == {"c"}


def test_non_ascii_output_and_error_are_shortened_by_characters(conn: redis.Redis) -> None:
    """The 240-character detail never splits a UTF-8 character (Lua would cut bytes)."""
    board = TaskBoard(conn, RunKeys("utf8"))
    board.create([TaskSpec(id="a", task="A"), TaskSpec(id="b", task="B")])
    output, error = "a" + "研" * 300, "é" * 119 + "研研" * 100
    board.complete("a", board.claim("a", "m1", "w:1", 30), output, 1)
    board.fail("b", board.claim("b", "m1", "w:1", 30), error, 1)
    a, b = board.get("a"), board.get("b")
    assert a.output == output and a.detail == output[:240] + "..."
    assert b.error == error and b.detail == error[:240] + "..."
    assert [t.task_id for t in board.snapshot()] == ["a", "b"]


def test_create_refuses_duplicate_or_unsafe_ids(conn: redis.Redis) -> None:
    board = TaskBoard(conn, RunKeys("dups"))
    with pytest.raises(ConfigError, match="duplicate task id 'a'"):
        board.create([TaskSpec(id="a", task="A"), TaskSpec(id="a", task="B")])
    with pytest.raises(ConfigError, match="invalid task id"):
        board.create([TaskSpec(id="a", task="A", depends_on=["x,y"])])
    assert board.snapshot() == []


def test_outcomes_are_announced_in_the_same_step_and_stale_ones_never(conn: redis.Redis) -> None:
    board = TaskBoard(conn, RunKeys("announce"))
    board.create([TaskSpec(id="a", task="A"), TaskSpec(id="b", task="B")])
    token_a = board.claim("a", "m1", "w:1", 30)
    token_b = board.claim("b", "m2", "w:1", 30)
    long_output = "x" * 300
    assert board.complete("a", token_a, long_output, 5, announce_as="m1") is WriteOutcome.APPLIED
    assert board.complete("a", token_a, "again", 5, announce_as="m1") is WriteOutcome.CONFLICT
    assert board.fail("b", next_token(token_b), "late", 5, announce_as="m2") is WriteOutcome.STALE
    assert board.fail("b", token_b, "boom: " + "e" * 300, 5, announce_as="m2") is (
        WriteOutcome.APPLIED
    )
    messages = MessageBus(conn, RunKeys("announce")).messages()
    assert [(m.from_, m.to, m.type, m.task_id) for m in messages] == [
        ("m1", "lead", "task.result", "a"),
        ("m2", "lead", "task.error", "b"),
    ]
    assert messages[0].content == long_output[:240] + "..."
    assert messages[1].content == "boom: " + "e" * 300  # task.error keeps the full error
