"""Provider limits shared by every worker: one gate in Redis around each real model attempt.

Before an attempt, one Lua call (limits_take.lua) checks the account's pause, takes a slot in the
model's RPM and TPM buckets and reserves the call's worst case against the run's or team's
budget; the caller sleeps until its slot. After it, one Lua call (limits_settle.lua) records what
the provider said (limits learned from its headers, a 429's pause of the whole account), moves
the TPM bucket by what the estimate missed, releases the reservation and charges the real usage.

Slots are GCRA reservations ("theoretical arrival times"): each caller gets the earliest slot the
buckets allow and moves them on, so callers are served in the order they asked, whichever run or
team they belong to: fair by construction, O(1), with no queue to scan.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from pydantic import BaseModel
from teamctl.shared.budget import Budget, Charge
from teamctl.shared.errors import BudgetSpent, ModelUnavailable
from teamctl.shared.keys import LIMITS_SALT, LimitKeys
from teamctl.shared.providers.limit_headers import Learned
from teamctl.shared.providers.limits_config import ModelLimit, merged
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.settings import Settings

log = logging.getLogger(__name__)

BUCKET_TTL_MS = 3_600_000
"""An unused bucket or account pause is forgotten after an hour (learned limits with it)."""
RESERVATION_TTL_MS = 600_000
"""How long past its slot a reservation outlives a worker that never settled it."""
TRIM_PER_CALL = 4
"""Expired reservations given back per take at most: the script stays bounded."""
LONGEST_BACKOFF_MS = 30_000
"""A 429 that named no time pauses the account 1 s, doubling while they come, up to this."""
EXPECTED_OUTPUT_TOKENS = 1024
"""A call's output counted against TPM before it is known (no max_tokens is sent)."""
WORST_OUTPUT_TOKENS = 4096
"""A call's worst-case output for a budget, when litellm does not know the model's maximum."""
CHARS_PER_TOKEN = 4
"""The estimate before a call: characters / 4 (no tokenizer: it must cost nothing)."""
BUDGET_POLL_S = 0.05
"""How often a call waits for others' reservations to settle when they hold its budget."""
STOP_POLL_S = 0.5
"""How often a waiting call asks its caller whether to stop (cancel, lost claim)."""
LIMIT_SHARE = 0.95
"""The share of the lowest known limit the slots use: a request reaches the provider some
milliseconds after its slot, not always the same, and one that arrives early is refused."""
SHOWN_WAIT_S = 0.25
"""Waits at least this long are recorded for `teamctl status` and the dashboard."""


class Waiting(BaseModel):
    """What a caller waits for: a model's rate slot or its account's pause (epoch ms)."""

    model: str
    since_ms: int
    until_ms: int


@dataclass
class CallScope:
    """Who pays for a caller's calls and how its waits end: per attempt, turn or lead."""

    budget: Budget | None = None
    """The run's or team's budget the calls are reserved against and charged to."""
    task_key: str | None = None
    """A member's task hash: its usage_* fields count the calls too."""
    stop: Callable[[], None] = lambda: None
    """Raises the caller's own error when a wait must end (cancel, lost claim, deadline)."""
    waiting: Callable[[Waiting | None], None] | None = None
    """Records (or clears, None) what the caller waits for, where status shows it."""
    on_charge: Callable[[Charge], object] | None = None
    """Told each settled call's budget state (the call that crossed a limit, once)."""

    @property
    def limited(self) -> bool:
        """Whether the calls have a budget to keep (a limit is set)."""
        return _limited(self.budget)


@dataclass
class Ticket:
    """One attempt's slot: what the settle must give back or adjust."""

    keys: LimitKeys
    bucket: str
    model: str
    counted_tokens: int
    reservation: str = ""
    configured: ModelLimit = field(default_factory=ModelLimit)


@dataclass
class ProviderLimits:
    """The gate of one process's model calls: accounts, configured limits, the two scripts."""

    conn: redis.Redis
    configured: Mapping[str, ModelLimit] = field(default_factory=dict)
    scripts: Scripts | GuardedScripts | None = None
    rates: bool = True
    """False (TEAMCTL_LIMITS=off): no shared slots or pauses; budgets are still reserved."""
    _salt: bytes | None = field(default=None, init=False)
    _prices: dict[str, tuple[int, float, float]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.scripts = self.scripts or Scripts(self.conn)

    def keys_for(self, provider: str, api_base: str | None, key_vars: tuple[str, ...]) -> LimitKeys:
        """The account a call goes to: a keyed digest of its provider (as litellm routes the
        model), the values of its key variables and api_base ("" for the provider's default).
        Never the key itself."""
        secret = "\0".join(os.environ.get(name, "") for name in key_vars)
        text = "\n".join([provider, secret, api_base or ""])
        return LimitKeys(
            hmac.new(self._account_salt(), text.encode(), hashlib.sha256).hexdigest()[:32]
        )

    def _account_salt(self) -> bytes:
        """The HMAC key shared by every worker, made once (SET NX) by the first that asks."""
        if self._salt is None:
            salt = self.conn.get(LIMITS_SALT)
            if salt is None:  # the first worker ever: one random key, whoever sets it first
                self.conn.set(LIMITS_SALT, secrets.token_hex(32), nx=True)
                salt = self.conn.get(LIMITS_SALT)
            self._salt = salt if isinstance(salt, bytes) else str(salt).encode()
        return self._salt

    def take(
        self,
        litellm: Any,
        keys: LimitKeys,
        model: str,
        request: Mapping[str, Any],
        scope: CallScope,
        wait_limit_s: float | None,
    ) -> Ticket:
        """Wait for `model`'s slot on its account (and the budget's reservation); the ticket
        the settle takes. ModelUnavailable("paused") when the slot is past `wait_limit_s`,
        BudgetSpent when the budget cannot cover the call, the scope's error when it stops."""
        configured = self.configured.get(model, ModelLimit())
        prompt = estimate_prompt_tokens(request)
        budget = scope.budget if scope.limited else None
        worst_tokens, worst_usd = self._worst_case(litellm, model, prompt) if budget else (0, 0.0)
        ticket = Ticket(
            keys,
            keys.bucket(_digest(model)),
            model,
            prompt + EXPECTED_OUTPUT_TOKENS,
            configured=configured,
        )
        if not self.rates and budget is None:
            return ticket  # nothing to wait for, nothing to reserve
        while True:
            verdict, wait_ms, detail, first = self._run_take(
                ticket, budget, worst_tokens, worst_usd, wait_limit_s
            )
            if verdict == "spent":
                if scope.on_charge is not None:  # told once, as a call that crossed it was
                    scope.on_charge(Charge(exceeded=detail, crossed=first))
                raise BudgetSpent(detail)
            if verdict == "far":
                raise ModelUnavailable(
                    f"model {model}: paused or rate-limited for "
                    f"{int(wait_ms) / 1000:.1f}s more, past the wait limit "
                    f"of {wait_limit_s:g}s",
                    model=model,
                    reason="paused",
                )
            if verdict == "wait":  # others' reservations hold the budget: until they settle
                self._wait(scope, model, BUDGET_POLL_S)
                continue
            ticket.reservation = str(detail)
            if int(wait_ms) <= 0:
                return ticket
            try:
                self._wait(scope, model, int(wait_ms) / 1000)
            except BaseException:  # stopped: the reservation goes back to the budget now
                self.settle(ticket, scope, answered=None)
                raise
            # A 429 met meanwhile paused every caller of the account: take a slot after it.
            if int(self._script("limits_paused")(keys=[keys.account, ticket.bucket])) <= 0:
                return ticket
            self.settle(ticket, scope, answered=None)

    def _run_take(
        self,
        ticket: Ticket,
        budget: Budget | None,
        worst_tokens: int,
        worst_usd: float,
        wait_limit_s: float | None,
    ) -> tuple[str, int, str, bool]:
        keys = [ticket.keys.account, ticket.bucket]
        if budget is not None:
            keys += [budget.keys.usage, budget.keys.reservations]
        limit = ticket.configured
        verdict, wait_ms, detail, first = self._script("limits_take")(
            keys=keys,
            args=[
                ticket.model,
                limit.rpm or "",
                limit.tpm or "",
                ticket.counted_tokens,
                "" if wait_limit_s is None else int(wait_limit_s * 1000),
                BUCKET_TTL_MS,
                uuid.uuid4().hex,
                worst_tokens,
                repr(float(worst_usd)),
                _or_blank(budget.max_tokens if budget else None),
                _or_blank(budget.max_cost_usd if budget else None),
                RESERVATION_TTL_MS,
                TRIM_PER_CALL,
                "1" if self.rates else "0",
                LIMIT_SHARE,
            ],
        )
        return str(verdict), int(wait_ms), str(detail), bool(int(first))

    def settle(
        self,
        ticket: Ticket,
        scope: CallScope,
        *,
        answered: Any | None,
        learned: Learned | None = None,
        pause: str = "",
    ) -> int:
        """Give back or charge one attempt: `answered` is the reply's Usage (None: no reply, or
        a slot given up); `pause` the account's pause in ms ("backoff": a 429 with no time).
        The ms the account was paused for."""
        learned = learned or Learned()
        budget = scope.budget
        keys = [ticket.keys.account, ticket.bucket]
        if budget is not None:
            keys += [budget.keys.usage, budget.keys.reservations]
            if scope.task_key:
                keys.append(scope.task_key)
        usage = answered
        exceeded, crossed, paused_ms = self._script("limits_settle")(
            keys=keys,
            args=[
                ticket.reservation,
                ticket.counted_tokens,
                usage.prompt_tokens if usage else 0,
                usage.completion_tokens if usage else 0,
                repr(float(usage.cost_usd)) if usage else "0",
                "1" if usage and usage.unpriced else "0",
                _or_blank(budget.max_tokens if budget else None),
                _or_blank(budget.max_cost_usd if budget else None),
                _or_blank(learned.rpm),
                _or_blank(learned.tpm),
                "" if learned.model_pause_s is None else int(learned.model_pause_s * 1000),
                pause,
                BUCKET_TTL_MS,
                LONGEST_BACKOFF_MS,
                _or_blank(ticket.configured.tpm),
                "1" if usage else "0",
                ticket.model,
                LIMIT_SHARE,
            ],
        )
        if usage is not None and budget is not None and scope.on_charge is not None:
            scope.on_charge(Charge(exceeded=exceeded or None, crossed=bool(int(crossed))))
        return int(paused_ms)

    def _wait(self, scope: CallScope, model: str, seconds: float) -> None:
        """Sleep `seconds` for a slot, asking the scope to stop each STOP_POLL_S, shown while
        it lasts; a wait is not a retry nor an attempt."""
        deadline = time.monotonic() + seconds
        shown = scope.waiting is not None and seconds >= SHOWN_WAIT_S
        if shown and scope.waiting:
            now_ms = int(time.time() * 1000)
            scope.waiting(
                Waiting(model=model, since_ms=now_ms, until_ms=now_ms + int(seconds * 1000))
            )
        try:
            while (left := deadline - time.monotonic()) > 0:
                scope.stop()
                time.sleep(min(left, STOP_POLL_S))
            scope.stop()
        finally:
            if shown and scope.waiting:
                scope.waiting(None)

    def _worst_case(self, litellm: Any, model: str, prompt: int) -> tuple[int, float]:
        """A call's worst case for a budget: the prompt estimate plus the model's maximum
        output, priced with litellm's per-token prices (unpriced models: tokens only)."""
        known = self._prices.get(model)
        if known is None:
            try:
                info = litellm.get_model_info(model)
            except Exception:  # a model litellm does not know: unpriced, default output
                info = {}
            known = (
                int(info.get("max_output_tokens") or WORST_OUTPUT_TOKENS),
                float(info.get("input_cost_per_token") or 0.0),
                float(info.get("output_cost_per_token") or 0.0),
            )
            self._prices[model] = known
        output, input_price, output_price = known
        return prompt + output, prompt * input_price + output * output_price

    def _script(self, name: str) -> Any:
        assert self.scripts is not None  # set in __post_init__
        return self.scripts[name]


def worker_limits(
    conn: redis.Redis, configured: Mapping[str, ModelLimit], settings: Settings | None
) -> ProviderLimits:
    """A worker's gate: the run's or team's limits and TEAMCTL_LIMITS (the lowest of each), or
    no shared slots when TEAMCTL_LIMITS=off."""
    own = settings.model_limits if settings else {}
    return ProviderLimits(
        conn, merged(configured, own), rates=settings.shared_limits if settings else True
    )


def estimate_prompt_tokens(request: Mapping[str, Any]) -> int:
    """Characters / 4 of the messages' contents and the tool schemas: a length sum, no
    tokenizer; the settle corrects the TPM bucket with the usage the provider reports."""
    chars = 0
    for message in request.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(
                len(str(part.get("text", ""))) for part in content if isinstance(part, Mapping)
            )
        for call in (message.get("tool_calls") or ()) if isinstance(message, Mapping) else ():
            chars += len(str(call))
    tools = request.get("tools")
    if tools:
        chars += len(json.dumps(tools))
    return chars // CHARS_PER_TOKEN + 1


def _limited(budget: Budget | None) -> bool:
    return budget is not None and (budget.max_tokens is not None or budget.max_cost_usd is not None)


def _digest(model: str) -> str:
    """A model string in a key: its digest (the string itself is a field of the bucket)."""
    return hashlib.sha256(model.encode()).hexdigest()[:24]


def _or_blank(value: float | int | None) -> str | float | int:
    if value is None:
        return ""
    return repr(float(value)) if isinstance(value, float) else value
