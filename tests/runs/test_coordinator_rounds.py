"""The round loop against a real board, with a recording dispatcher whose 'worker' is driven by
conditions on what the loop has done (no sleeps): round counting and redispatch after reclaim."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.hooks import HookRunner
from teamctl.coordinator.runs.progress import Reporter
from teamctl.coordinator.runs.rounds import LoopState, RoundLoop
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import TeamFile
from teamctl.shared.tracing import Span

from tests.support.waiting import wait_until


class RecordingDispatcher:
    """Records enqueued task ids; counts the loop's passes (it asks about ended jobs each pass)."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []
        self.passes = 0

    def enqueue(self, task_id: str, queue_name: str) -> str:
        self.enqueued.append(task_id)
        return f"job-{len(self.enqueued)}"

    def ended(self, job_ids: list[str], stale_after_s: float) -> set[str]:
        self.passes += 1
        return set()

    @contextlib.contextmanager
    def under(self, span: Span) -> Iterator[Span]:
        """The jobs enqueued meanwhile belong under `span` (untraced here)."""
        yield span


def make_loop(
    conn: redis.Redis, tmp_path: Path, run_id: str, tasks: list[TaskSpec], **options: object
) -> tuple[RoundLoop, RecordingDispatcher]:
    team = TeamFile(options=RunOptions(timeout_s=60, **options))
    models = ModelChoice(planner="p", synthesizer="s", member_default="m")
    spec = create_run(
        conn,
        RunRequest(objective="o", team=team, models=models, workspace_root=tmp_path, run_id=run_id),
    )
    run = RunHandle(conn, run_id, spec=spec)
    run.board.create(tasks)
    dispatcher = RecordingDispatcher()
    ctx = RunContext(run=run, dispatcher=dispatcher, hooks=HookRunner([]), reporter=Reporter(False))
    return RoundLoop(ctx, time.monotonic() + 60), dispatcher


def run_in_thread(loop: RoundLoop) -> tuple[threading.Thread, list[LoopState]]:
    result: list[LoopState] = []
    thread = threading.Thread(target=lambda: result.append(loop.run(LoopState())), daemon=True)
    thread.start()
    return thread, result


def test_eager_refills_join_the_open_round(conn: redis.Redis, tmp_path: Path) -> None:
    """12 independent tasks, 4 at a time, ending one by one: one wave, not one round per refill
    (which would block the plan at max_rounds 2)."""
    tasks = [TaskSpec(id=f"t{i}", member_id="researcher", task="x") for i in range(12)]
    loop, dispatcher = make_loop(conn, tmp_path, "eager", tasks, max_concurrency=4, max_rounds=2)
    worker = TaskBoard(conn, RunKeys("eager"))
    thread, result = run_in_thread(loop)
    running: list[tuple[str, int]] = []
    claimed = 0
    for done in range(12):
        # Wait for the loop to refill the slot the previous completion freed (while any remain).
        wanted = min(12, 4 + done)
        wait_until(lambda w=wanted: len(dispatcher.enqueued) >= w, 10, message="a refill")
        for task_id in dispatcher.enqueued[claimed:]:
            running.append((task_id, worker.claim(task_id, "researcher", "w:1", 30)))
        claimed = len(dispatcher.enqueued)
        task_id, token = running.pop(0)
        worker.complete(task_id, token, "ok", 1)
    thread.join(10)
    assert result and result[0].rounds == 1
    assert dispatcher.enqueued == [f"t{i}" for i in range(12)]
    assert {t.status for t in worker.snapshot()} == {TaskStatus.COMPLETED}


def test_a_reclaimed_task_is_enqueued_again_once(conn: redis.Redis, tmp_path: Path) -> None:
    loop, dispatcher = make_loop(
        conn,
        tmp_path,
        "reclaim",
        [TaskSpec(id="a", member_id="researcher", task="x")],
        heartbeat_ttl_s=0.3,
    )
    worker = TaskBoard(conn, RunKeys("reclaim"))
    thread, result = run_in_thread(loop)
    wait_until(lambda: dispatcher.enqueued == ["a"], 10, message="the first dispatch")
    worker.claim("a", "researcher", "w:dies", 0.3)  # and never heartbeats: its worker died
    wait_until(lambda: len(dispatcher.enqueued) == 2, 10, message="the redispatch after reclaim")
    # Let the loop make several more passes while the second job is still unclaimed.
    passes = dispatcher.passes
    wait_until(lambda: dispatcher.passes >= passes + 3, 10, message="three more loop passes")
    token = worker.claim("a", "researcher", "w:2", 30)
    worker.complete("a", token, "ok", 1)
    thread.join(10)
    assert dispatcher.enqueued == ["a", "a"]
    assert result and result[0].rounds == 1
    task = worker.get("a")
    assert (task.status, task.attempts) == (TaskStatus.COMPLETED, 2)


def test_a_member_busy_past_the_stop_grace_is_given_up_on(
    conn: redis.Redis, tmp_path: Path
) -> None:
    """Cancelled while a member is inside one long model call: after the grace period the task
    fails "cancelled" (no task is left in progress), and the member's late write is refused."""
    loop, dispatcher = make_loop(
        conn,
        tmp_path,
        "stuck",
        [
            TaskSpec(id="a", member_id="researcher", task="x"),
            TaskSpec(id="b", member_id="researcher", task="y", depends_on=["a"]),
        ],
        heartbeat_ttl_s=0.2,
    )
    worker = TaskBoard(conn, RunKeys("stuck"))
    thread, result = run_in_thread(loop)
    wait_until(lambda: dispatcher.enqueued == ["a"], 10, message="the dispatch of a")
    token = worker.claim("a", "researcher", "w:busy", 60)  # alive: its heartbeat key lasts 60 s
    RunStore(conn, RunKeys("stuck")).request_stop("cancelled")
    thread.join(10)
    assert not thread.is_alive() and result and result[0].stop is not None
    a, b = worker.get("a"), worker.get("b")
    assert (a.status, a.error, a.token) == (TaskStatus.FAILED, "cancelled", "0")
    assert (b.status, b.error) == (TaskStatus.BLOCKED, "cancelled")
    assert worker.complete("a", token, "too late", 1) is WriteOutcome.STALE
    assert worker.get("a").status is TaskStatus.FAILED


def test_a_task_ending_between_dispatch_and_the_in_flight_check_is_no_cycle(
    conn: redis.Redis, tmp_path: Path
) -> None:
    """Barrier mode, a -> b: while a is in flight the dispatch step takes nothing; a completes
    right after it, before the in-flight check, leaving b ready and nothing in flight. That
    pass must not call the plan stuck and block b as cyclic (it did once in CI, ceedd93); the
    next pass dispatches b."""
    loop, dispatcher = make_loop(
        conn,
        tmp_path,
        "barrier-race",
        [
            TaskSpec(id="a", member_id="researcher", task="x"),
            TaskSpec(id="b", member_id="researcher", task="y", depends_on=["a"]),
        ],
        dispatch="barrier",
    )
    worker = TaskBoard(conn, RunKeys("barrier-race"))
    state = LoopState()
    assert not loop._nothing_can_run(state)
    assert dispatcher.enqueued == ["a"]
    token = worker.claim("a", "researcher", "w:1", 30)
    loop.drain(state)  # the claim: a is in progress, no longer queued
    dispatch_round = loop._dispatch_round

    def dispatch_then_a_ends(state: LoopState) -> int:
        taken = dispatch_round(state)
        assert taken == 0  # barrier: a is still in flight
        assert worker.complete("a", token, "done", 1) is WriteOutcome.APPLIED
        return taken

    loop._dispatch_round = dispatch_then_a_ends
    assert not loop._nothing_can_run(state)
    b = worker.get("b")
    assert (b.status, b.error) == (TaskStatus.READY, None)
    loop._dispatch_round = dispatch_round
    assert not loop._nothing_can_run(state)
    assert dispatcher.enqueued == ["a", "b"]
