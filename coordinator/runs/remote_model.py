"""The coordinator's model calls, made by workers: enqueue an attempt, wait for its outcome.

The coordinator needs no provider key and never imports litellm. What it waits on is in Redis
(shared/runs/model_call_records.py), so a resumed coordinator picks up a call its predecessor
started.
"""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.worker_wait import WaitCancelled, WorkerWait
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.errors import BudgetSpent, InfraError, ModelError
from teamctl.shared.runs.model_call_records import CallView, ModelCallRecords, ModelCallRequest


class NoReply(InfraError):
    """No worker took a model call in time, or its job failed on the worker."""


@dataclass(frozen=True)
class ModelCall:
    """One call to make: which (planner, synthesizer), on which queue, asking what."""

    name: str
    queue: str
    request: ModelCallRequest


class RemoteModel:
    """Makes a coordinator model call through the workers and returns its reply."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.calls = ModelCallRecords(ctx.run.conn, ctx.run.keys, ctx.run.scripts)
        self._job_id: str | None = None
        """The job of the current attempt, when this coordinator enqueued it."""
        self._attempt = 0
        """The attempt this coordinator waits for."""

    def complete(self, call: ModelCall, begin_by: float) -> ModelReply:
        """The reply to `call`. A worker must begin it by the monotonic time `begin_by`; once
        one has, the wait lasts while it beats (its own model timeout bounds the call).

        A model error the worker met raises ModelError (BudgetSpent when the run's budget could
        not cover the call); no worker in time, or a job that failed
        on its worker, raises NoReply; a cancel raises WaitCancelled; a lost lease raises
        RunFailed. A call whose worker died is started again, up to `max_attempts` times."""
        self._job_id = None
        attempt = self._adopt_or_start(call)
        try:
            return self._await(call, attempt, begin_by)
        except (WaitCancelled, NoReply):
            # Fence the attempt: a job still queued for it (no worker yet) must not make a paid
            # call for a run that stopped waiting.
            self.calls.start(call.name, call.request, replacing=self._attempt)
            raise

    def _await(self, call: ModelCall, attempt: int, begin_by: float) -> ModelReply:
        """Wait for the outcome of `attempt`, replacing it when its worker is gone."""
        self._attempt = attempt
        wait = WorkerWait(self.ctx, begin_by)  # the deadline holds until a worker begins
        while True:
            view = self.calls.view(call.name)
            if view.attempt == self._attempt and view.outcome is not None:
                wait.check_lease()  # a coordinator that lost its lease uses nothing
                return _reply_of(call, view)
            self._check_still_wanted(call, view, wait)
            lost = self._lost(call, view)
            if lost is not None and self._retry(call, lost):
                wait.restart_hint()
            elif not view.began:
                wait.hint_if_unserved([call.queue])
            # Not cut at the deadline: a call a worker began is waited for past it.
            wait.sleep(self.ctx.run.keys.model_call_done, stop_at_deadline=False)

    def _adopt_or_start(self, call: ModelCall) -> int:
        """The current attempt when it asks the same and is answered or still alive (a resumed
        coordinator), else a new one (also after a call the budget could not cover: asked again
        once it was raised)."""
        view = self.calls.view(call.name)
        same = view.request == call.request.model_dump_json()
        answered = view.outcome is not None and not view.outcome.budget_spent
        if same and (answered or (view.began and view.beating)):
            self._attempt = view.attempt
            return view.attempt
        return self._enqueue(call)

    def _enqueue(self, call: ModelCall, replacing: int | None = None) -> int:
        """Start a new attempt and queue its job; 0 (nothing queued) when `replacing` is no
        longer the current unanswered attempt."""
        attempt = self.calls.start(call.name, call.request, replacing=replacing)
        if attempt:
            self._attempt = attempt
            self._job_id = self.ctx.dispatcher.enqueue_call(call.name, attempt, call.queue)
        return attempt

    def _lost(self, call: ModelCall, view: CallView) -> str | None:
        """Why the current attempt will never be answered, or None while it may be: its worker
        stopped beating, or its job vanished or hung before it began (a job that failed there
        raises NoReply with the job's error: another attempt would fail the same way)."""
        if view.attempt != self._attempt or view.outcome is not None:
            return None
        if view.began:
            return None if view.beating else "stopped beating"
        dispatcher = self.ctx.dispatcher
        if self._job_id is None or not dispatcher.ended(
            [self._job_id], stale_after_s=self.ctx.run.spec.options.heartbeat_ttl_s
        ):
            return None
        failure = dispatcher.failure(self._job_id)
        if failure is not None:
            raise NoReply(f"the {call.name} job failed on its worker before it began: {failure}")
        return "vanished before it began"

    def _retry(self, call: ModelCall, reason: str) -> bool:
        """Ask another worker; False when the attempt was answered meanwhile (kept)."""
        if self._attempt >= self.ctx.run.spec.options.max_attempts:
            raise NoReply(
                f"the worker making the {call.name} call {reason}, "
                f"{self._attempt} times (max_attempts)"
            )
        if not self._enqueue(call, replacing=self._attempt):
            return False
        self.ctx.reporter.note(f"the worker making the {call.name} call {reason}; asking another")
        return True

    def _check_still_wanted(self, call: ModelCall, view: CallView, wait: WorkerWait) -> None:
        """Stop waiting on a lost lease, a cancel, or a call no worker began in time."""
        wait.check_still_wanted(call.name)
        if not view.began and wait.timed_out():
            raise NoReply(
                f"no worker took the {call.name} call in time (the run's timeout_s="
                f"{self.ctx.run.spec.options.timeout_s:g}); is a worker listening on "
                f"queue {call.queue}? (`teamctl workers` lists them)"
            )


def _reply_of(call: ModelCall, view: CallView) -> ModelReply:
    """The reply of an answered call; ModelError with the worker's reason when it failed."""
    outcome = view.outcome
    assert outcome is not None
    if outcome.budget_spent:
        raise BudgetSpent(outcome.error or "budget spent")
    if outcome.reply is None:
        raise ModelError(outcome.error or f"the {call.name} call failed without a reason")
    return outcome.reply
