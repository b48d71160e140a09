"""A coordinator's model call (planner, synthesizer) made on a worker, where the provider keys
live; the outcome goes back to Redis, fenced by the attempt the coordinator gave the job."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis
from teamctl.shared.agent.fallbacks import Cooldowns, FallbackCaller, FallbackNote, ModelLedger
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.tracing_caller import reply_attributes, request_attributes
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import BudgetSpent, ConfigError, ModelError
from teamctl.shared.providers.limits import ProviderLimits, worker_limits
from teamctl.shared.redis.connection import set_outage
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.model_call_records import (
    ModelCallOutcome,
    ModelCallRecords,
    ModelCallRequest,
)
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.settings import load_settings
from teamctl.shared.tracing import NO_TRACING, Tracing
from teamctl.worker.keepalive import KeepAlive

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallTrace:
    """Where the call's `chat` span goes: this process's tracing, under the coordinator's span
    (its plan or synthesis) that enqueued the job."""

    tracing: Tracing = NO_TRACING
    traceparent: str | None = None


def execute_model_call(
    conn: redis.Redis,
    run_id: str,
    call: str,
    attempt: int,
    *,
    provider_keys: frozenset[str] | tuple[str, ...],
    worker: str,
    trace: CallTrace = CallTrace(),
) -> str:
    """Begin the attempt, call the model while beating, write the outcome; the job's summary."""
    run = RunHandle(conn, run_id)
    options = run.spec.options
    set_outage(conn, options.redis_outage_s)
    calls = ModelCallRecords(conn, run.keys)
    request = calls.begin(call, attempt, worker, options.heartbeat_ttl_s)
    if request is None:
        return f"skipped: {call} attempt {attempt} is no longer current"
    ttl_s = options.heartbeat_ttl_s
    span = trace.tracing.start(
        f"chat {request.model}",
        parent=trace.traceparent,
        attributes={
            **request_attributes(request.model, request.messages, None),
            "teamctl.run_id": run_id,
            "teamctl.call": call,
            "teamctl.attempt": attempt,
            "teamctl.worker": worker,
        },
    )
    # Beating stops once the coordinator gave up on this attempt (refresh answers False).
    with span, KeepAlive(lambda: calls.beat(call, attempt, ttl_s), ttl_s, f"{call}-call-beat"):
        limits = worker_limits(conn, run.spec.limits, load_settings())
        outcome = _ask(request, _caller(run, call, request, provider_keys, limits), worker)
        if outcome.reply is not None:
            span.set(reply_attributes(outcome.reply, request.model))
        else:
            span.fail("ModelError")
    if not calls.finish(call, attempt, outcome):
        return f"{call} attempt {attempt}: outcome refused (the coordinator moved on)"
    return f"{call} attempt {attempt}: {'failed' if outcome.error else 'answered'}"


def _caller(
    run: RunHandle,
    call: str,
    request: ModelCallRequest,
    provider_keys: frozenset[str] | tuple[str, ...],
    limits: ProviderLimits,
) -> FallbackCaller:
    """The role's model, then its fallbacks, with the run's timeout and retries; a fallback's
    answer is an event on the run's bus, and each answer's usage is kept under its model.
    Rate-limited with every other caller of the account; the coordinator charges the usage."""
    options: RunOptions = run.spec.options
    client = LitellmClient(
        provider_keys=provider_keys,
        timeout_s=options.model_timeout_s,
        max_retries=options.model_max_retries,
        limits=limits,
    )

    def fell_back(note: FallbackNote) -> None:
        run.bus.tell_lead(SystemType.MODEL_FALLBACK, None, f"{call}: {note.text()}")

    return FallbackCaller(
        client,
        request.fallbacks,
        options.fallback_after_s,
        Cooldowns(run.conn, options.fallback_cooldown_s),
        ModelLedger(run.conn, run.keys),
        on_fallback=fell_back,
    )


def _ask(request: ModelCallRequest, caller: FallbackCaller, worker: str) -> ModelCallOutcome:
    """One model call with its fallbacks; any failure becomes the outcome."""
    try:
        reply = caller.complete(request.model, request.messages, api_base=request.api_base)
    except (ModelError, ConfigError) as exc:  # a model string or a setting to mend: its line
        return ModelCallOutcome(error=str(exc), worker=worker)
    except BudgetSpent as exc:  # the call's reservation: the run pauses, then asks again
        return ModelCallOutcome(error=str(exc), worker=worker, budget_spent=True)
    except Exception as exc:  # a bug here must reach the run's error, not only a worker log
        log.exception("model call failed")
        return ModelCallOutcome(error=f"{type(exc).__name__}: {exc}", worker=worker)
    return ModelCallOutcome(reply=reply, worker=worker)
