"""The round loop: reclaim, check limits, pick ready tasks, enqueue, wait for events."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis

from coordinator.dispatcher import Dispatcher
from shared.board import TaskBoard
from shared.bus import MessageBus
from shared.models import TaskStatus
from shared.runstore import RunStore
from shared.team import RunSpec

CYCLE_REASON = "unresolved dependencies or cyclic plan"
STOPPED_REASON = "not run: the run stopped after a member failure"
EVENT_BATCH = 100


@dataclass
class LoopState:
    """What the loop remembers between iterations (the rest lives on the board)."""

    rounds: int = 0
    events_from: str = "0-0"
    queued: set[str] = field(default_factory=set)
    """Tasks enqueued but not yet claimed: they count as in flight."""
    stop_reason: str | None = None


class RoundLoop:
    """Drives one run's board until no work remains."""

    def __init__(self, conn: redis.Redis, spec: RunSpec, board: TaskBoard, bus: MessageBus,
                 store: RunStore, dispatcher: Dispatcher, deadline: float) -> None:
        self.conn, self.spec, self.board, self.bus, self.store = conn, spec, board, bus, store
        self.dispatcher = dispatcher
        self.deadline = deadline
        self.options = spec.options

    def run(self, state: LoopState) -> LoopState:
        while self.board.has_work_remaining():
            if self._stop_requested(state):
                self.board.block_stalled(state.stop_reason or "stopped")
                if not self._in_flight(state):
                    break
            else:
                self.board.reclaim_expired(self.options.max_attempts)
                if self._rounds_exhausted(state):
                    break
                if self._dispatch_round(state) == 0 and not self._in_flight(state):
                    self.board.block_stalled(CYCLE_REASON)
                    break
            self._wait_for_events(state)
        return state

    def _stop_requested(self, state: LoopState) -> bool:
        if self.store.cancelled():
            state.stop_reason = "cancelled"
        elif time.monotonic() >= self.deadline:
            state.stop_reason = f"run timed out after {self.options.timeout_s:g}s"
        return state.stop_reason is not None

    def _rounds_exhausted(self, state: LoopState) -> bool:
        if state.rounds < self.options.max_rounds or self._in_flight(state):
            return False
        self.board.block_stalled(f"max rounds exceeded: {self.options.max_rounds}")
        return True

    def _in_flight(self, state: LoopState) -> int:
        return self.board.counts().get(TaskStatus.IN_PROGRESS, 0) + len(state.queued)

    def _dispatch_round(self, state: LoopState) -> int:
        """Enqueue ready tasks up to the batch size; returns how many were enqueued."""
        in_flight = self._in_flight(state)
        if self.options.dispatch == "barrier" and in_flight:
            return 0
        capacity = self.options.batch_size() - in_flight
        if capacity <= 0 or state.rounds >= self.options.max_rounds:
            return 0
        ready = [t for t in self.board.next_ready(capacity + len(state.queued))
                 if t not in state.queued][:capacity]
        dispatched = [t for t in ready if self._dispatch(t)]
        state.queued.update(dispatched)
        if ready:
            state.rounds += 1
            self.store.set_rounds(state.rounds)
        return len(dispatched) or len(ready)

    def _dispatch(self, task_id: str) -> bool:
        task = self.board.get(task_id)
        if task is None:
            return False
        member = self.spec.member_for(task.member_id)
        if member is None:
            self.board.fail(task_id, None, f"unknown team member: {task.member_id}")
            return False
        if self.spec.resolve_member(task.member_id) is None:
            self.bus.publish("system", "lead", "run.warning", task_id,
                             f"unknown team member {task.member_id!r}: routed to {member.id}")
        self.dispatcher.enqueue(task_id, member.queue)
        return True

    def _wait_for_events(self, state: LoopState) -> None:
        """Block on the events stream (no polling); wake at least every ttl/3 to reclaim."""
        timeout_s = max(0.05, min(self.options.heartbeat_ttl_s / 3,
                                  self.deadline - time.monotonic()))
        reply = self.conn.xread({self.board.keys.events: state.events_from},
                                count=EVENT_BATCH, block=int(timeout_s * 1000))
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                state.events_from = entry_id
                self._on_event(state, fields)

    def _on_event(self, state: LoopState, fields: dict[str, str]) -> None:
        # Any change (claimed, ended, reclaimed to ready) means the queued job was consumed.
        state.queued.discard(fields.get("task_id", ""))
        if fields.get("status") == "failed" and not self.options.continue_on_member_error:
            state.stop_reason = STOPPED_REASON
