"""Budgets (`max_tokens`, `max_cost_usd`) of a run or a persistent team, kept in Redis so every
worker sees one total.

Before each model call the provider limits' take (limits_take.lua) reserves the call's worst
case (prompt estimate + the model's maximum output, priced) against these limits, so callers in
flight together never promise more than the budget holds; the settle charges the real usage and
records, exactly once, the call that crossed a limit. The planner's and synthesizer's usage is
charged after the call with `charge()` (not reserved: a run needs both, and waits on neither).

A spent budget pauses the run or team (it never fails it): `top_up` adds to the limits (the
usage hash's added_tokens / added_usd, which the call reservation adds to the configured max too)
and clears the recorded reason, and the callers go on.
"""

from __future__ import annotations

import math

import redis
from pydantic import BaseModel, field_validator
from teamctl.shared.agent.replies import Usage
from teamctl.shared.keys import RunKeys, TeamKeys
from teamctl.shared.redis.hash_fields import HashInt, HashText
from teamctl.shared.redis.scripts import GuardedScripts, Scripts

MIN_TOP_UP_TOKENS = 10_000
TOKENS_STEP = 1_000
"""A suggested token top-up is a round number of this many."""


class UsageTotals(Usage):
    """A run's or a team's usage hash: the totals, the top-ups, and why the budget is spent
    once it is."""

    budget_exceeded: HashText = None
    added_tokens: HashInt = 0
    """Tokens added to max_tokens by `teamctl budget --add-tokens` (every top-up, summed)."""
    added_usd: float = 0.0
    """Dollars added to max_cost_usd by `teamctl budget --add-usd` (every top-up, summed)."""
    next_tokens: HashInt = 0
    """The worst case in tokens of the latest call the reservation was asked for."""
    next_usd: float = 0.0
    """The worst case in dollars of that call."""

    @field_validator("added_usd", "next_usd", mode="before")
    @classmethod
    def _blank_is_zero(cls, value: object) -> object:
        return 0.0 if value == "" else value


class BudgetState(BaseModel):
    """What `teamctl budget` shows: the limits as configured, what was added, what was spent,
    and why no new call may start (None while the budget lasts)."""

    max_tokens: int | None
    max_cost_usd: float | None
    added_tokens: int = 0
    added_usd: float = 0.0
    tokens: int = 0
    cost_usd: float = 0.0
    exceeded: str | None = None

    def lines(self) -> list[str]:
        """One line per limit, then the state."""
        lines = []
        if self.max_tokens is not None:
            lines.append(
                f"tokens: {self.tokens} used of {self.max_tokens + self.added_tokens} "
                f"(max_tokens {self.max_tokens} + {self.added_tokens} added)"
            )
        if self.max_cost_usd is not None:
            lines.append(
                f"cost: ${self.cost_usd:.4f} spent of "
                f"${self.max_cost_usd + self.added_usd:.4f} (max_cost_usd "
                f"{self.max_cost_usd:g} + {self.added_usd:g} added)"
            )
        if not lines:
            lines.append("no budget: neither max_tokens nor max_cost_usd is set")
        lines.append(f"spent: {self.exceeded}" if self.exceeded else "the budget lasts")
        return lines


class Charge(BaseModel):
    """The budget's state after a call was charged."""

    exceeded: str | None = None
    """Why no new model call may start, once a limit is reached."""
    crossed: bool = False
    """True for the one call that crossed a limit (so the run reports it once)."""


class Budget:
    """The token and cost limits of one run or team, checked against its usage totals."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: RunKeys | TeamKeys,
        *,
        max_tokens: int | None,
        max_cost_usd: float | None,
        scripts: Scripts | GuardedScripts | None = None,
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.scripts = scripts or Scripts(conn)

    def exceeded(self) -> str | None:
        """Why no new model call may start, or None while the budget lasts (top-ups count)."""
        return self._exceeded(UsageTotals.model_validate(self.conn.hgetall(self.keys.usage)))

    def _exceeded(self, totals: UsageTotals) -> str | None:
        if totals.budget_exceeded:  # a charge crossed a limit, or a call could not be covered
            return totals.budget_exceeded
        tokens = totals.prompt_tokens + totals.completion_tokens
        cost_usd = totals.cost_usd
        # Planner and synthesizer usage is added without a budget check; it still counts.
        if self.max_tokens is not None and tokens >= self.max_tokens + totals.added_tokens:
            return (
                f"budget exceeded: {tokens} tokens used, max_tokens is {self.max_tokens}"
                + _added(totals.added_tokens)
            )
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd + totals.added_usd:
            return (
                f"budget exceeded: ${cost_usd:g} spent, max_cost_usd is "
                f"{self.max_cost_usd:g}" + _added(totals.added_usd)
            )
        return None

    @property
    def limited(self) -> bool:
        """Whether a limit is set at all (without one nothing is ever spent)."""
        return self.max_tokens is not None or self.max_cost_usd is not None

    def state(self) -> BudgetState:
        """The limits, the top-ups, the totals and whether the budget is spent."""
        totals = UsageTotals.model_validate(self.conn.hgetall(self.keys.usage))
        return BudgetState(
            max_tokens=self.max_tokens,
            max_cost_usd=self.max_cost_usd,
            added_tokens=totals.added_tokens,
            added_usd=totals.added_usd,
            tokens=totals.prompt_tokens + totals.completion_tokens,
            cost_usd=totals.cost_usd,
            exceeded=self._exceeded(totals),
        )

    def top_up_flag(self) -> str:
        """The `teamctl budget` flag that lets the next call start: for a limit this budget
        has, what the latest call's worst case needs past what is left, rounded up (at least
        10,000 tokens or $1, so a pasted top-up is not spent again by the next call)."""
        totals = UsageTotals.model_validate(self.conn.hgetall(self.keys.usage))
        if self.max_cost_usd is not None:
            left_usd = self.max_cost_usd + totals.added_usd - totals.cost_usd
            return f"--add-usd {max(1, math.ceil(totals.next_usd - left_usd)):d}"
        left = (
            (self.max_tokens or 0)
            + totals.added_tokens
            - totals.prompt_tokens
            - totals.completion_tokens
        )
        need = math.ceil((totals.next_tokens - left) / TOKENS_STEP) * TOKENS_STEP
        return f"--add-tokens {max(MIN_TOP_UP_TOKENS, need)}"

    def mark_spent(self, reason: str) -> bool:
        """Record that the budget cannot cover a call (BudgetSpent from the model call, when
        the totals alone do not say so), so every caller pauses; True for the first to say."""
        return bool(self.conn.hsetnx(self.keys.usage, "budget_exceeded", reason))

    def top_up(self, tokens: int = 0, usd: float = 0.0) -> BudgetState:
        """Add to the limits (the added_tokens / added_usd fields the reservation reads too)
        and clear the recorded reason, so callers look again; the state after."""
        self.scripts["budget_topup"](keys=[self.keys.usage], args=[tokens, repr(float(usd))])
        return self.state()

    def charge(self, usage: Usage, task_id: str | None = None) -> Charge:
        """Add one call's usage to the totals (and the task's) and check the limits,
        atomically."""
        task_keys = [self.keys.task(task_id)] if task_id else []
        _tokens, _cost, reason, crossed = self.scripts["budget_charge"](
            keys=[self.keys.usage, *task_keys],
            args=[
                usage.prompt_tokens,
                usage.completion_tokens,
                repr(float(usage.cost_usd)),
                "1" if usage.unpriced else "0",
                "" if self.max_tokens is None else self.max_tokens,
                "" if self.max_cost_usd is None else repr(float(self.max_cost_usd)),
            ],
        )
        return Charge(exceeded=reason or None, crossed=bool(int(crossed)))


def _added(amount: float) -> str:
    """How a reason names the top-ups, when there were some."""
    return f" + {amount:g} added" if amount else ""
