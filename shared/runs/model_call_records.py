"""The coordinator's model calls (planner, synthesizer) as records in Redis that workers serve.

The coordinator never talks to a model: it writes a request, enqueues a job, and waits for the
outcome a worker writes back. Each new attempt fences the earlier ones (call_*.lua), so a worker
that was given up on can neither begin nor answer the call any more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis
from pydantic import BaseModel, Field
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.clock import ttl_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import Scripts

REUSED_WORKER = "recorded"
"""The worker an answer taken from another run's records names."""
KEEP_BEAT_S = 5.0
"""The beat of a kept call, which ends at once (finish drops it)."""


class ModelCallRequest(BaseModel):
    """What to ask which model; the worker adds its own provider keys."""

    model: str
    api_base: str | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list)
    fallbacks: list[str] = Field(default_factory=list)
    """Models tried in order when `model` cannot answer (the role's fallbacks)."""


class ModelCallOutcome(BaseModel):
    """A worker's answer to one attempt: the reply, or why the call failed."""

    reply: ModelReply | None = None
    error: str | None = None
    worker: str = ""
    budget_spent: bool = False
    """The call was not made: the run's budget cannot cover it (BudgetSpent); the run pauses."""


@dataclass(frozen=True)
class CallView:
    """One consistent read of a call: which attempt is current, whether a worker began it and
    still beats, and its outcome if it has one."""

    attempt: int
    request: str | None
    began: bool
    beating: bool
    outcome: ModelCallOutcome | None


class ModelCallRecords:
    """The model call records of one run, for the coordinator and the workers alike."""

    def __init__(self, conn: redis.Redis, keys: RunKeys, scripts: Scripts | None = None) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts or Scripts(conn)

    def start(self, call: str, request: ModelCallRequest, *, replacing: int | None = None) -> int:
        """A new attempt with this request; its number. With `replacing`, only if that attempt
        is still current and unanswered; 0 (nothing changed) otherwise."""
        return int(
            self.scripts["call_start"](
                keys=[self.keys.model_call(call), self.keys.model_call_beat(call)],
                args=[request.model_dump_json(), "" if replacing is None else replacing],
            )
        )

    def view(self, call: str) -> CallView:
        """The call as it is now, read in one transaction (an outcome and the end of its beat
        are written together, so a finished call never looks like a dead worker)."""
        pipe = self.conn.pipeline(transaction=True)
        pipe.hmget(self.keys.model_call(call), "attempt", "request", "began", "outcome")
        pipe.exists(self.keys.model_call_beat(call))
        (attempt, request, began, outcome), beating = pipe.execute()
        return CallView(
            attempt=int(attempt or 0),
            request=_text(request),
            began=began is not None and began == attempt,
            beating=bool(beating),
            outcome=ModelCallOutcome.model_validate_json(outcome) if outcome else None,
        )

    def begin(self, call: str, attempt: int, worker: str, ttl_s: float) -> ModelCallRequest | None:
        """Take `attempt` (a worker); None when it is no longer current or already taken."""
        raw = self.scripts["call_begin"](
            keys=[self.keys.model_call(call), self.keys.model_call_beat(call)],
            args=[attempt, worker, ttl_ms(ttl_s)],
        )
        return ModelCallRequest.model_validate_json(raw) if raw else None

    def beat(self, call: str, attempt: int, ttl_s: float) -> bool:
        """Keep a begun attempt alive; False once it was superseded or answered."""
        verdict: str = self.scripts["call_beat"](
            keys=[self.keys.model_call(call), self.keys.model_call_beat(call)],
            args=[attempt, ttl_ms(ttl_s)],
        )
        return verdict == "ok"

    def finish(self, call: str, attempt: int, outcome: ModelCallOutcome) -> bool:
        """Record the outcome of a begun attempt and wake the coordinator; False if refused."""
        verdict: str = self.scripts["call_finish"](
            keys=[
                self.keys.model_call(call),
                self.keys.model_call_beat(call),
                self.keys.model_call_done,
            ],
            args=[attempt, outcome.model_dump_json()],
        )
        return verdict == "ok"

    def keep(self, call: str, request: ModelCallRequest, outcome: ModelCallOutcome) -> None:
        """Record a reply taken from another run's records as this run's answered call, so the
        run's records are whole (a replay of a replay finds them)."""
        attempt = self.start(call, request)
        self.begin(call, attempt, REUSED_WORKER, KEEP_BEAT_S)
        self.finish(call, attempt, outcome.model_copy(update={"worker": REUSED_WORKER}))


def _text(value: Any) -> str | None:
    """A hash field as text, whether the connection decodes replies or not."""
    return value.decode() if isinstance(value, bytes) else value
