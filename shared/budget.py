"""Budgets (`max_tokens`, `max_cost_usd`) of a run or a persistent team, kept in Redis so every
worker sees one total.

Before each model call a member (or teammate, or the team's lead) asks `exceeded()`; after it,
`charge()` adds the call's usage and checks the limits in one Lua script, so the call that crosses
a limit is known exactly once (the reason is recorded in the usage hash). A call's cost is only
known after it returns, so a budget can be overshot by at most one call per caller in flight; no
new call starts once a limit is reached.
"""

from __future__ import annotations

import redis
from pydantic import BaseModel
from teamctl.shared.agent.replies import Usage
from teamctl.shared.keys import RunKeys, TeamKeys
from teamctl.shared.redis.hash_fields import HashText
from teamctl.shared.redis.scripts import GuardedScripts, Scripts


class UsageTotals(Usage):
    """A run's or a team's usage hash: the totals, and why the budget is spent once it is."""

    budget_exceeded: HashText = None


class Charge(BaseModel):
    """The budget's state after a call was charged."""

    exceeded: str | None = None
    """Why no new model call may start, once a limit is reached."""
    crossed: bool = False
    """True for the one call that crossed a limit (so the run reports it once)."""


class Budget:
    """The token and cost limits of one run or team, checked against its usage totals."""

    def __init__(self, conn: redis.Redis, keys: RunKeys | TeamKeys, *, max_tokens: int | None,
                 max_cost_usd: float | None,
                 scripts: Scripts | GuardedScripts | None = None) -> None:
        self.conn = conn
        self.keys = keys
        self.max_tokens = max_tokens
        self.max_cost_usd = max_cost_usd
        self.scripts = scripts or Scripts(conn)

    def exceeded(self) -> str | None:
        """Why no new model call may start, or None while the budget lasts."""
        totals = UsageTotals.model_validate(self.conn.hgetall(self.keys.usage))
        if totals.budget_exceeded:
            return totals.budget_exceeded
        tokens = totals.prompt_tokens + totals.completion_tokens
        cost_usd = totals.cost_usd
        # Planner and synthesizer usage is added without a budget check; it still counts.
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"budget exceeded: {tokens} tokens used, max_tokens is {self.max_tokens}"
        if self.max_cost_usd is not None and cost_usd >= self.max_cost_usd:
            return f"budget exceeded: ${cost_usd:g} spent, max_cost_usd is {self.max_cost_usd:g}"
        return None

    def charge(self, usage: Usage, task_id: str | None = None) -> Charge:
        """Add one call's usage to the totals (and the task's) and check the limits,
        atomically."""
        task_keys = [self.keys.task(task_id)] if task_id else []
        _tokens, _cost, reason, crossed = self.scripts["budget_charge"](
            keys=[self.keys.usage, *task_keys],
            args=[usage.prompt_tokens, usage.completion_tokens, repr(float(usage.cost_usd)),
                  "1" if usage.unpriced else "0",
                  "" if self.max_tokens is None else self.max_tokens,
                  "" if self.max_cost_usd is None else repr(float(self.max_cost_usd))])
        return Charge(exceeded=reason or None, crossed=bool(int(crossed)))
