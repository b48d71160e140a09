"""Fallback models: a call its model cannot answer now (retries spent, a context-window or
content-policy refusal, a paused account) goes to the role's next model, and each call starts
at the primary again, so a run returns to it as soon as it answers.

A model whose retries were just spent is remembered in Redis for `fallback_cooldown_s` (one
key per model and API base, shared by every worker): calls that have another model skip it
meanwhile instead of paying its retries again, and the first call after the key expires
probes it. The last model of a chain is never skipped: a call always tries something.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis
from pydantic import BaseModel, Field
from teamctl.shared.agent.model_caller import Message
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.clock import ttl_ms
from teamctl.shared.errors import ModelUnavailable
from teamctl.shared.keys import KeySpace, model_cooldown

COOLDOWN_REASON = "cooldown"
"""Why a model was skipped without a call: its retries were spent by a recent call."""


class WaitingClient(Protocol):
    """What makes one model's call: LitellmClient, whose wait for a paused account is bounded."""

    def complete(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
        wait_limit_s: float | None = None,
    ) -> ModelReply: ...


class Passed(BaseModel):
    """A model a call passed over, and why (a ModelUnavailable reason, or `cooldown`)."""

    model: str
    reason: str


class FallbackNote(BaseModel):
    """A call its primary model did not answer: what answered instead, and what was passed."""

    primary: str
    answered: str
    passed: list[Passed] = Field(default_factory=list)

    def text(self) -> str:
        """One line for events and logs."""
        why = ", ".join(f"{p.model} ({p.reason})" for p in self.passed)
        return f"answered by fallback {self.answered} after {why}"


class Cooldowns:
    """Which models calls skip for a while after their retries were spent (shared in Redis)."""

    def __init__(self, conn: redis.Redis | None, cooldown_s: float) -> None:
        self.conn = conn
        self.cooldown_s = cooldown_s

    def cooling(self, model: str, api_base: str | None) -> bool:
        """Whether `model` at `api_base` spent its retries less than cooldown_s ago."""
        if self.conn is None or self.cooldown_s <= 0:
            return False
        return bool(self.conn.exists(model_cooldown(model, api_base)))

    def start(self, model: str, api_base: str | None) -> None:
        """Remember that `model` just spent its retries (the key expires on its own)."""
        if self.conn is not None and self.cooldown_s > 0:
            self.conn.set(model_cooldown(model, api_base), "1", px=ttl_ms(self.cooldown_s))


class ModelLedger:
    """Usage per answering model of one run or team (its `model_usage` hash), and on a record
    (a task's hash, a teammate's) the model that answered its last call, in `answered_field`,
    and the primary it fell back from (`fallback_from`, '' when the primary answered)."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: KeySpace,
        task_key: str | None = None,
        answered_field: str = "model",
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.task_key = task_key
        self.answered_field = answered_field

    def record(self, reply: ModelReply, primary: str) -> None:
        """Add one answered call's usage under the model that answered it."""
        model = reply.model or primary
        usage, hash_key = reply.usage, self.keys.model_usage
        pipe = self.conn.pipeline(transaction=True)
        pipe.hincrby(hash_key, f"{model} prompt_tokens", usage.prompt_tokens)
        pipe.hincrby(hash_key, f"{model} completion_tokens", usage.completion_tokens)
        pipe.hincrbyfloat(hash_key, f"{model} cost_usd", usage.cost_usd)
        pipe.hincrby(hash_key, f"{model} calls", 1)
        if model != primary:
            pipe.hincrby(hash_key, f"{model} fallback_calls", 1)
        if usage.unpriced:
            pipe.hset(hash_key, f"{model} unpriced", 1)
        if self.task_key:
            pipe.hset(
                self.task_key,
                mapping={
                    self.answered_field: model,
                    "fallback_from": primary if model != primary else "",
                },
            )
        pipe.execute()


@dataclass
class FallbackCaller:
    """A ModelCaller over `client` that tries the call's model, then each of `fallbacks`."""

    client: WaitingClient
    fallbacks: Sequence[str] = ()
    fallback_after_s: float | None = None
    """How long a call that has another model left waits for a paused account."""
    cooldowns: Cooldowns = field(default_factory=lambda: Cooldowns(None, 0))
    ledger: ModelLedger | None = None
    on_fallback: Callable[[FallbackNote], None] | None = None
    """Told of every call a fallback answered (an event, a span's attribute)."""

    def complete(
        self,
        model: str,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
    ) -> ModelReply:
        """The first answer of `model` and its fallbacks, in order; the last one's error when
        none answers; any other ModelError at once (bad request, credentials)."""
        chain = list(dict.fromkeys([model, *self.fallbacks]))
        passed: list[Passed] = []
        for index, name in enumerate(chain):
            last = index == len(chain) - 1
            if not last and self.cooldowns.cooling(name, api_base):
                passed.append(Passed(model=name, reason=COOLDOWN_REASON))
                continue
            try:
                reply = self.client.complete(
                    name,
                    messages,
                    tools=tools,
                    api_base=api_base,
                    wait_limit_s=None if last else self.fallback_after_s,
                )
            except ModelUnavailable as exc:
                if last:
                    raise
                if exc.reason == "retries_spent":
                    self.cooldowns.start(name, api_base)
                passed.append(Passed(model=name, reason=exc.reason))
                continue
            return self._answered(model, name, reply, passed)
        raise AssertionError("unreachable: the last model either answers or raises")

    def _answered(
        self, primary: str, name: str, reply: ModelReply, passed: list[Passed]
    ) -> ModelReply:
        """The reply, named for the model that gave it, recorded and announced."""
        reply = reply if reply.model else reply.model_copy(update={"model": name})
        if self.ledger is not None:
            self.ledger.record(reply, primary)
        if passed and self.on_fallback is not None:
            self.on_fallback(FallbackNote(primary=primary, answered=name, passed=passed))
        return reply
