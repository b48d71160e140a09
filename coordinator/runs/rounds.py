"""The round loop: reclaim, check limits, pick ready tasks, enqueue, wait for events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.hooks import HOOK_ERROR_TYPE
from teamctl.coordinator.runs.result import ended_member_result
from teamctl.coordinator.runs.run_control import resume_hint
from teamctl.coordinator.runs.worker_wait import WAKE_EVERY_S
from teamctl.shared.envelopes import SystemType
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.task_records import EventKind, TaskState, TaskStatus
from teamctl.shared.tracing import NO_SPAN, Span

CYCLE_REASON = "unresolved dependencies or cyclic plan"
STOPPED_REASON = "not run: the run stopped after a member failure"
CANCELLED = "cancelled"
EVENT_BATCH = 100
CONSUMED = frozenset(
    {EventKind.IN_PROGRESS, EventKind.COMPLETED, EventKind.FAILED, EventKind.BLOCKED}
)
"""Events after which a queued job has nothing left to do (its task was claimed or ended).
Not reclaimed/released/reassigned: those can be read after the task was enqueued again."""
ENDED_TASK_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.BLOCKED})
ENDED_EVENTS = frozenset({EventKind.COMPLETED, EventKind.FAILED, EventKind.BLOCKED})
STOP_GRACE_TTLS = 3
"""After a cancel or timeout, wait this many heartbeat TTLs for in-flight claims to end."""


@dataclass(frozen=True)
class RunStop:
    """Why dispatch stopped early: the run's final status and error, and the blocked reason."""

    status: RunStatus
    error: str
    block_reason: str
    wait_until: float
    """Monotonic time after which in-flight tasks are no longer waited for."""


@dataclass
class LoopState:
    """What the loop remembers between iterations (the rest lives on the board)."""

    rounds: int = 0
    events_from: str = "0-0"
    bus_from: str = "0-0"
    queued: dict[str, str] = field(default_factory=dict)
    """Task id -> RQ job id of tasks enqueued but not yet claimed: they count as in flight."""
    open_round: set[str] = field(default_factory=set)
    """Tasks dispatched in the current round that have not ended. In eager mode a refill joins
    the open round; a new round starts only once it is empty (as AI4J counts waves)."""
    stop: RunStop | None = None
    paused: str | None = None
    """Why dispatch waits for `teamctl budget` (the run is awaiting_budget), or None."""


class RoundLoop:
    """Drives one run's board until no work remains or the run is stopped."""

    def __init__(self, ctx: RunContext, deadline: float, trace: Span = NO_SPAN) -> None:
        self.ctx = ctx
        self.trace = trace
        """The run's span (this coordinator's): each round's is a child of it."""
        self.round_span: Span = NO_SPAN
        """The current round's span; the tasks it dispatches are traced under it."""
        self.board = ctx.run.board
        self.options = ctx.run.spec.options
        self.deadline = deadline
        self.budget = (
            ctx.run.budget
            if self.options.max_tokens is not None or self.options.max_cost_usd is not None
            else None
        )

    def run(self, state: LoopState) -> LoopState:
        """Loop until the board has no work left, nothing can run, or the run is stopped."""
        try:
            return self._run(state)
        finally:
            self.round_span.end()
            self.round_span = NO_SPAN

    def _run(self, state: LoopState) -> LoopState:
        # A budget spent by the last tasks pauses the run before its synthesis, too.
        while self.board.has_work_remaining() or self._paused_at_end(state):
            self.ctx.run.lease.check()
            if self._stopping(state):
                if self._drained(state):
                    break
            elif self._paused(state):  # nothing is dispatched; in-flight tasks give theirs back
                self._reclaim_expired()
                self._forget_ended_jobs(state)
            else:
                self._reclaim_expired()
                self._forget_ended_jobs(state)
                if self._rounds_exhausted(state) or self._nothing_can_run(state):
                    break
            self._show_progress()
            self._read_events(state, block=True)
        self.drain(state)  # fire hooks for the last changes
        self._show_progress()
        if state.stop is None and self.ctx.run.store.stop_reason() == CANCELLED:
            # The cancel landed as the last tasks ended (members stop on it, too).
            state.stop = RunStop(RunStatus.CANCELLED, CANCELLED, CANCELLED, time.monotonic())
            self.trace.event("teamctl.run.cancelled")
        return state

    def _show_progress(self) -> None:
        if self.ctx.reporter.live:
            self.ctx.reporter.tick(self.board.snapshot())

    def drain(self, state: LoopState) -> None:
        """Handle the events and messages that arrived since the last read, without blocking."""
        self._read_events(state, block=False)

    def _stopping(self, state: LoopState) -> bool:
        """Notice a cancel or the timeout; True once dispatch must stop."""
        if state.stop is None and not self.options.continue_on_member_error:
            self._stop_if_failed(state)  # also after a resume: the failure event may be old
        if state.stop is None:
            reason = self.ctx.run.store.stop_reason()
            if reason is None and time.monotonic() >= self.deadline:
                reason = f"run timed out after {self.options.timeout_s:g}s"
                self.ctx.run.store.request_stop(reason)  # members stop between model calls
            if reason is not None:
                grace_s = STOP_GRACE_TTLS * self.options.heartbeat_ttl_s
                status = RunStatus.CANCELLED if reason == CANCELLED else RunStatus.FAILED
                state.stop = RunStop(status, reason, reason, time.monotonic() + grace_s)
                self.trace.event(
                    "teamctl.run.cancelled" if reason == CANCELLED else "teamctl.run.stopped"
                )
        return state.stop is not None

    def _paused_at_end(self, state: LoopState) -> bool:
        """No work is left but the budget is spent: wait for a top-up before the synthesis."""
        return state.stop is None and self._paused(state)

    def _paused(self, state: LoopState) -> bool:
        """Whether dispatch waits for a top-up: pause once the budget is spent (members give
        their claims back before their next call), resume once `teamctl budget` raised it."""
        if self.budget is None:
            return False
        spent = self.budget.exceeded()
        if spent and state.paused is None:
            self._pause(state, spent)
        elif not spent and state.paused is not None:
            self._resume(state)
        return state.paused is not None

    def _pause(self, state: LoopState, spent: str) -> None:
        """awaiting_budget, said once: the event, the lead's notice, the line with the commands."""
        run, run_id = self.ctx.run, self.ctx.run.spec.run_id
        state.paused = spent
        run.store.set_status(RunStatus.AWAITING_BUDGET)
        self.ctx.reporter.phase(RunStatus.AWAITING_BUDGET)
        self.trace.event("teamctl.run.awaiting_budget")
        run.bus.tell_lead(SystemType.RUN_AWAITING_BUDGET, None, spent)
        self.ctx.reporter.note(f"run {run_id} paused ({spent}): {resume_hint(run)}")

    def _resume(self, state: LoopState) -> None:
        """Back to running once the budget was raised; the tasks given back are dispatched."""
        run, run_id = self.ctx.run, self.ctx.run.spec.run_id
        state.paused = None
        run.store.set_status(RunStatus.RUNNING)
        self.ctx.reporter.phase(RunStatus.RUNNING)
        self.trace.event("teamctl.run.resumed")
        run.bus.tell_lead(
            SystemType.RUN_BUDGET_ADDED, None, "the budget was raised: the run goes on"
        )
        self.ctx.reporter.note(f"run {run_id} resumed: its budget was raised")

    def _stop_if_failed(self, state: LoopState) -> None:
        if self.board.counts().get(TaskStatus.FAILED, 0) == 0:
            return
        failed = next(t for t in self.board.snapshot() if t.status is TaskStatus.FAILED)
        state.stop = self._member_failure_stop(failed)

    def _member_failure_stop(self, failed: TaskState | None) -> RunStop:
        """continue_on_member_error is off and a task failed: the run fails without synthesis."""
        who = (failed.claimed_by or failed.member_id) if failed else "?"
        reason = (failed.error if failed else None) or "unknown error"
        error = f"team member failed: {who} -> {reason}"
        return RunStop(RunStatus.FAILED, error, STOPPED_REASON, self.deadline)

    def _drained(self, state: LoopState) -> bool:
        """Block what never ran; True once nothing is in flight (or the grace period is over)."""
        assert state.stop is not None
        self._reclaim_expired()
        self.board.block_stalled(state.stop.block_reason)
        if not self._in_flight(state):
            return True
        if time.monotonic() < state.stop.wait_until:
            return False
        # Members still busy past the grace period (one long model call) are given up on, so the
        # run ends with no task left in progress; their late writes are refused.
        self.board.fail_in_progress(
            state.stop.block_reason, announce_failures=self.ctx.run.bus.enabled
        )
        return True

    def _reclaim_expired(self) -> None:
        reclaimed = self.board.reclaim_expired(
            self.options.max_attempts, announce_failures=self.ctx.run.bus.enabled
        )
        for task_id in reclaimed:  # its worker stopped beating: died, hung or cut off
            (self.round_span if self.round_span is not NO_SPAN else self.trace).event(
                "teamctl.task.reclaimed", {"teamctl.task_id": task_id}
            )

    def _rounds_exhausted(self, state: LoopState) -> bool:
        if state.rounds < self.options.round_limit() or self._in_flight(state):
            return False
        self.board.block_stalled(f"max rounds exceeded: {self.options.round_limit()}")
        return True

    def _nothing_can_run(self, state: LoopState) -> bool:
        """Dispatch a round; True (and the rest blocked) if nothing is ready or in flight."""
        if self._dispatch_round(state):
            return False
        # Read again, in this order: a task that ended since the dispatch step looked (barrier
        # mode waits while anything is in flight) may have left ready work behind. With nothing
        # in flight, nothing can become ready later, so an empty ready set then is final.
        if self._in_flight(state) or self.board.next_ready(1):
            return False
        self.board.block_stalled(CYCLE_REASON)
        return True

    def _forget_ended_jobs(self, state: LoopState) -> None:
        """A job that ended without claiming its task (it failed, or its worker died before the
        claim) no longer counts as in flight, so its task is dispatched again."""
        ended = self.ctx.dispatcher.ended(
            list(state.queued.values()), stale_after_s=self.options.heartbeat_ttl_s
        )
        state.queued = {t: job for t, job in state.queued.items() if job not in ended}

    def _in_flight(self, state: LoopState) -> int:
        return self.board.counts().get(TaskStatus.IN_PROGRESS, 0) + len(state.queued)

    def _dispatch_round(self, state: LoopState) -> int:
        """Enqueue ready tasks up to the batch size; returns how many were taken off ready."""
        in_flight = self._in_flight(state)
        if self.options.dispatch == "barrier" and in_flight:
            return 0
        capacity = self.options.batch_size() - in_flight
        if capacity <= 0:
            return 0
        new_round = not self._round_still_open(state)
        if new_round and state.rounds >= self.options.round_limit():
            return 0
        ready = [
            t for t in self.board.next_ready(capacity + len(state.queued)) if t not in state.queued
        ][:capacity]
        if not ready:
            return 0
        if new_round:
            state.rounds += 1
            self.ctx.run.store.set_rounds(state.rounds)
            self._start_round_span(state.rounds)
        state.open_round.update(ready)
        with self.ctx.dispatcher.under(self.round_span):
            for task_id in ready:
                job_id = self._dispatch(task_id)
                if job_id is not None:
                    state.queued[task_id] = job_id
        self.round_span.set({"teamctl.tasks": len(state.open_round)})
        return len(ready)

    def _start_round_span(self, number: int) -> None:
        """End the last round's span, start this one's."""
        self.round_span.end()
        self.round_span = self.trace.child(f"round {number}", {"teamctl.round": number})

    def _round_still_open(self, state: LoopState) -> bool:
        """Drop ended tasks from the open round (read from the board, not from events that may
        still be unread); True while some of its tasks have not ended."""
        if state.open_round:
            pipe = self.ctx.run.conn.pipeline(transaction=False)
            ids = sorted(state.open_round)
            for task_id in ids:
                pipe.hget(self.board.keys.task(task_id), "status")
            state.open_round = {
                t for t, s in zip(ids, pipe.execute(), strict=True) if s not in ENDED_TASK_STATUSES
            }
        return bool(state.open_round)

    def _dispatch(self, task_id: str) -> str | None:
        """Enqueue one task (returns the job id); an unknown member fails it here instead."""
        spec = self.ctx.run.spec
        task = self.board.get(task_id)
        if task is None:
            return None
        member = spec.member_for(task.member_id)
        if member is None:
            self.board.fail(task_id, None, f"unknown team member: {task.member_id}")
            return None
        if spec.resolve_member(task.member_id) is None:
            self.ctx.run.bus.tell_lead(
                SystemType.RUN_WARNING,
                task_id,
                f"unknown team member {task.member_id!r}: routed to {member.id}",
            )
        return self.ctx.dispatcher.enqueue(task_id, member.queue)

    def _read_events(self, state: LoopState, *, block: bool) -> None:
        """Block on the events stream (no polling); wake at least every ttl/3 to reclaim, and
        every WAKE_EVERY_S for an interrupt from this process (Team.run's timeout), which no
        event announces."""
        timeout_s = max(
            0.05,
            min(
                self.options.heartbeat_ttl_s / 3,
                self.options.lease_ttl_s / 3,
                WAKE_EVERY_S,
                self.deadline - time.monotonic(),
            ),
        )
        while True:
            events = self.board.read_events(
                state.events_from, EVENT_BATCH, int(timeout_s * 1000) if block else None
            )
            for event in events:
                state.events_from = event.id
                self._on_event(state, event.task_id, event.status)
            if self.ctx.hooks:
                self._fire_message_hooks(state)
            if block or len(events) < EVENT_BATCH:
                return

    def _fire_message_hooks(self, state: LoopState) -> None:
        """on_message for every message published since the last call."""
        while messages := self.ctx.run.bus.tail(state.bus_from, None):
            for message in messages:
                state.bus_from = message.id
                if message.type != HOOK_ERROR_TYPE:  # a failing on_message must not feed itself
                    self.ctx.hooks.call("on_message", message)

    def _on_event(self, state: LoopState, task_id: str, status: EventKind) -> None:
        if status in CONSUMED:
            state.queued.pop(task_id, None)
        if status in ENDED_EVENTS:
            state.open_round.discard(task_id)
        if not task_id:
            return  # a wake-up (cancel, approval), not a task change
        if (
            status is EventKind.FAILED
            and not self.options.continue_on_member_error
            and not state.stop
        ):
            state.stop = self._member_failure_stop(self.board.get(task_id))
        if self.ctx.hooks:
            self._fire_task_hooks(task_id, status)

    def _fire_task_hooks(self, task_id: str, status: EventKind) -> None:
        task = self.board.get(task_id)
        if task is None:
            return
        spec, hooks = self.ctx.run.spec, self.ctx.hooks
        member = spec.member(task.claimed_by) or spec.member_for(task.member_id)
        hooks.call("on_task_state_changed", spec.objective, task, member, task.detail)
        if status is EventKind.IN_PROGRESS:
            hooks.call("before_task", spec.objective, task, member)
        elif status in (EventKind.COMPLETED, EventKind.FAILED):
            hooks.call("after_task", spec.objective, ended_member_result(self.ctx.run, task))
