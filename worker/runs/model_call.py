"""A coordinator's model call (planner, synthesizer) made on a worker, where the provider keys
live; the outcome goes back to Redis, fenced by the attempt the coordinator gave the job."""

from __future__ import annotations

import logging

import redis
from teamctl.shared.agent.llm import ModelClient
from teamctl.shared.errors import ModelError
from teamctl.shared.redis.connection import set_outage
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.model_calls import ModelCallOutcome, ModelCallRequest, ModelCalls
from teamctl.shared.runs.options import RunOptions
from teamctl.worker.keepalive import KeepAlive

log = logging.getLogger(__name__)


def execute_model_call(conn: redis.Redis, run_id: str, call: str, attempt: int, *,
                       provider_keys: frozenset[str] | tuple[str, ...], worker: str) -> str:
    """Begin the attempt, call the model while beating, write the outcome; the job's summary."""
    run = RunHandle(conn, run_id)
    options = run.spec.options
    set_outage(conn, options.redis_outage_s)
    calls = ModelCalls(conn, run.keys)
    request = calls.begin(call, attempt, worker, options.heartbeat_ttl_s)
    if request is None:
        return f"skipped: {call} attempt {attempt} is no longer current"
    ttl_s = options.heartbeat_ttl_s
    # Beating stops once the coordinator gave up on this attempt (refresh answers False).
    with KeepAlive(lambda: calls.beat(call, attempt, ttl_s), ttl_s, f"{call}-call-beat"):
        outcome = _ask(request, options, provider_keys, worker)
    if not calls.finish(call, attempt, outcome):
        return f"{call} attempt {attempt}: outcome refused (the coordinator moved on)"
    return f"{call} attempt {attempt}: {'failed' if outcome.error else 'answered'}"


def _ask(request: ModelCallRequest, options: RunOptions,
         provider_keys: frozenset[str] | tuple[str, ...], worker: str) -> ModelCallOutcome:
    """One model call with the run's timeout and retries; any failure becomes the outcome."""
    client = ModelClient(provider_keys=provider_keys, timeout_s=options.model_timeout_s,
                         max_retries=options.model_max_retries)
    try:
        reply = client.complete(request.model, request.messages, api_base=request.api_base)
    except ModelError as exc:
        return ModelCallOutcome(error=str(exc), worker=worker)
    except Exception as exc:  # a bug here must reach the run's error, not only a worker log
        log.exception("model call failed")
        return ModelCallOutcome(error=f"{type(exc).__name__}: {exc}", worker=worker)
    return ModelCallOutcome(reply=reply, worker=worker)
