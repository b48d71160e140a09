"""The coordinator's model calls, made by workers: enqueue an attempt, wait for its outcome.

The coordinator needs no provider key and never imports litellm; what it waits on is in Redis
(shared/model_calls.py), so a resumed coordinator picks up a call its predecessor started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from teamctl.coordinator.context import RunContext
from teamctl.coordinator.worker_registry import listening_workers
from teamctl.shared.connection import block_ms
from teamctl.shared.errors import InfraError, ModelError
from teamctl.shared.model_calls import CallView, ModelCallRequest, ModelCalls
from teamctl.shared.models import ModelReply

WAKE_EVERY_S = 1.0
"""How often the wait re-checks its worker, the lease, a cancel and the deadline."""
NO_WORKER_HINT_AFTER_S = 3.0
"""How long a call may wait unbegun before stderr says whether any worker listens."""


class CallCancelled(Exception):
    """The run was cancelled while the coordinator waited for a model call."""


class NoReply(InfraError):
    """No worker answered a model call before the run's deadline."""


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
        self.calls = ModelCalls(ctx.conn, ctx.run.keys, ctx.run.scripts)
        self.blocking_conn = ctx.store.blocking_conn
        self._job_id: str | None = None
        """The job of the current attempt, when this coordinator enqueued it."""

    def complete(self, call: ModelCall, wait_until: float) -> ModelReply:
        """The reply to `call`, waiting until the monotonic time `wait_until`.

        A model error the worker met raises ModelError; no reply in time raises NoReply; a
        cancel raises CallCancelled; a lost lease raises RunFailed. A call whose worker died
        is started again, up to `max_attempts` times in all."""
        self._job_id = None
        attempt = self._adopt_or_start(call)
        started_at, hinted = time.monotonic(), False
        while True:
            view = self.calls.view(call.name)
            if view.attempt == attempt and view.outcome is not None:
                return _reply_of(call, view)
            self._check_still_wanted(call, wait_until)
            if _worker_lost(view, attempt) or self._job_died_unbegun(view):
                attempt = self._retry(call, view)
                started_at, hinted = time.monotonic(), False
            elif not view.began and not hinted \
                    and time.monotonic() - started_at > NO_WORKER_HINT_AFTER_S:
                hinted = self._hint_if_nobody_listens(call.queue)
            self.blocking_conn.blpop([self.ctx.run.keys.model_call_done],
                                     timeout=block_ms(WAKE_EVERY_S * 1000) / 1000)

    def _adopt_or_start(self, call: ModelCall) -> int:
        """The current attempt when it asks the same and is answered or still alive (a resumed
        coordinator), else a new one."""
        view = self.calls.view(call.name)
        same = view.request == call.request.model_dump_json()
        if same and (view.outcome is not None or (view.began and view.beating)):
            return view.attempt
        return self._enqueue(call)

    def _enqueue(self, call: ModelCall) -> int:
        attempt = self.calls.start(call.name, call.request)
        self._job_id = self.ctx.dispatcher.enqueue_call(call.name, attempt, call.queue)
        return attempt

    def _job_died_unbegun(self, view: CallView) -> bool:
        """This coordinator's job for the attempt ended, vanished or hung before it began the
        call (a worker killed as it started it, an import failing there)."""
        if view.began or self._job_id is None:
            return False
        ttl_s = self.ctx.spec.options.heartbeat_ttl_s
        return bool(self.ctx.dispatcher.ended([self._job_id], stale_after_s=ttl_s))

    def _retry(self, call: ModelCall, view: CallView) -> int:
        if view.attempt >= self.ctx.spec.options.max_attempts:
            raise ModelError(f"the worker making the {call.name} call stopped beating "
                             f"{view.attempt} times (max_attempts)")
        self.ctx.reporter.note(f"the worker making the {call.name} call stopped beating; "
                               "asking another")
        return self._enqueue(call)

    def _check_still_wanted(self, call: ModelCall, wait_until: float) -> None:
        self.ctx.lease.check()
        if self.ctx.store.cancelled():
            raise CallCancelled(call.name)
        if time.monotonic() >= wait_until:
            raise NoReply(f"no reply to the {call.name} call before the run's timeout_s="
                            f"{self.ctx.spec.options.timeout_s:g}; is a worker listening on "
                            f"queue {call.queue}? (`teamctl workers` lists them)")

    def _hint_if_nobody_listens(self, queue: str) -> bool:
        """Say on stderr how to start a worker when none listens on `queue`; True once said
        or not needed."""
        if not listening_workers(self.ctx.dispatcher.rq_conn, [queue]):
            self.ctx.reporter.note(
                f"no worker listens on queue {queue}; the run waits until one does: "
                f"`teamctl workers start --queue {queue}`, or on any host that reaches this "
                f"Redis `RQ_CONFIG=teamctl.worker.settings rq worker {queue}`")
        return True


def _worker_lost(view: CallView, attempt: int) -> bool:
    """The current attempt began on a worker that no longer beats and left no outcome."""
    return view.attempt == attempt and view.began and not view.beating and view.outcome is None


def _reply_of(call: ModelCall, view: CallView) -> ModelReply:
    outcome = view.outcome
    assert outcome is not None
    if outcome.reply is None:
        raise ModelError(outcome.error or f"the {call.name} call failed without a reason")
    return outcome.reply
