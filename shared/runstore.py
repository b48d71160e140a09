"""Run-level records in Redis: the immutable spec, the mutable state hash, the runs index."""

from __future__ import annotations

import time

import redis
from pydantic import BaseModel

from shared.errors import ConfigError
from shared.keys import RUNS_INDEX, RunKeys
from shared.models import Plan, RunStatus, Usage
from shared.team import RunSpec

WAKE_TASK_ID = ""
"""Events with an empty task id are wake-ups for the coordinator (cancel, approval), not board
changes."""


class RunState(BaseModel):
    """The run's mutable state (one hash)."""

    status: RunStatus = RunStatus.PLANNING
    rounds: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    output: str | None = None
    error: str | None = None
    plan: Plan | None = None
    approval: str | None = None
    """"approved" or "rejected" once somebody decided on the plan."""
    approval_reason: str | None = None

    @property
    def finished(self) -> bool:
        return self.status.finished


def now_ms() -> int:
    """Wall-clock milliseconds, the unit every stored time uses."""
    return int(time.time() * 1000)


class RunStore:
    """Reads and writes one run's spec and state."""

    def __init__(self, conn: redis.Redis, run_id: str) -> None:
        self.conn = conn
        self.run_id = run_id
        self.keys = RunKeys(run_id)

    def create(self, spec: RunSpec) -> None:
        """Store the spec once; a second run with the same id is refused."""
        if not self.conn.set(self.keys.spec, spec.model_dump_json(), nx=True):
            raise ConfigError(f"run {spec.run_id} already exists; pass another --run-id")
        self.conn.hset(self.keys.state, mapping={"status": RunStatus.PLANNING, "rounds": 0,
                                                 "started_ms": spec.created_ms})
        self.conn.zadd(RUNS_INDEX, {spec.run_id: spec.created_ms})

    def exists(self) -> bool:
        """Whether the run was ever created (its spec is stored)."""
        return bool(self.conn.exists(self.keys.spec))

    def spec(self) -> RunSpec:
        """The run's immutable spec; ConfigError names `teamctl runs` if there is none."""
        raw = self.conn.get(self.keys.spec)
        if raw is None:
            raise ConfigError(f"no run {self.run_id}; `teamctl runs` lists the known runs")
        return RunSpec.model_validate_json(raw)

    def state(self) -> RunState:
        """The run's mutable state, parsed from its hash."""
        raw = self.conn.hgetall(self.keys.state)
        plan = Plan.model_validate_json(raw["plan"]) if raw.get("plan") else None
        return RunState(
            status=RunStatus(raw.get("status", RunStatus.PLANNING)),
            rounds=int(raw.get("rounds", 0)),
            started_ms=int(raw.get("started_ms", 0)), ended_ms=int(raw.get("ended_ms", 0)),
            output=raw.get("output"), error=raw.get("error") or None, plan=plan,
            approval=raw.get("approval") or None,
            approval_reason=raw.get("approval_reason") or None)

    def set_status(self, status: RunStatus, **extra: str | int) -> None:
        """Move the run to `status`, with any extra state fields."""
        self.conn.hset(self.keys.state, mapping={"status": status, **extra})

    def save_plan(self, plan: Plan) -> None:
        """Store the normalized plan (made once; resume reuses it)."""
        self.conn.hset(self.keys.state, "plan", plan.model_dump_json())

    def set_rounds(self, rounds: int) -> None:
        """Record how many rounds have been dispatched so far."""
        self.conn.hset(self.keys.state, "rounds", rounds)

    def finish(self, status: RunStatus, output: str | None, error: str | None = None) -> None:
        """End the run with its final status, output and error."""
        mapping: dict[str, str | int] = {"status": status, "ended_ms": now_ms()}
        if output is not None:
            mapping["output"] = output
        if error is not None:
            mapping["error"] = error
        self.conn.hset(self.keys.state, mapping=mapping)

    def add_usage(self, usage: Usage) -> None:
        """Add a model call's usage to the run totals (atomic increments)."""
        pipe = self.conn.pipeline(transaction=True)
        pipe.hincrby(self.keys.usage, "prompt_tokens", usage.prompt_tokens)
        pipe.hincrby(self.keys.usage, "completion_tokens", usage.completion_tokens)
        pipe.hincrbyfloat(self.keys.usage, "cost_usd", usage.cost_usd)
        if usage.unpriced:
            pipe.hset(self.keys.usage, "unpriced", 1)
        pipe.execute()

    def usage(self) -> Usage:
        """The run's token and cost totals."""
        raw = self.conn.hgetall(self.keys.usage)
        return Usage(prompt_tokens=int(raw.get("prompt_tokens", 0)),
                     completion_tokens=int(raw.get("completion_tokens", 0)),
                     cost_usd=float(raw.get("cost_usd", 0.0)),
                     unpriced=bool(raw.get("unpriced")))

    def cancelled(self) -> bool:
        """Whether somebody asked the run to stop (members check it between calls)."""
        return bool(self.conn.exists(self.keys.cancel))

    def stop_reason(self) -> str | None:
        """Why members were told to stop ("cancelled", or a timeout), or None."""
        return self.conn.get(self.keys.cancel)

    def request_stop(self, reason: str) -> None:
        """Tell members and the coordinator to stop; the first reason given is kept."""
        self.conn.set(self.keys.cancel, reason, nx=True)
        self.wake("stop")

    def record_approval(self, approved: bool, reason: str | None) -> bool:
        """Store the plan decision once (False if one was already made), then wake the waiter."""
        decision = "approved" if approved else "rejected"
        if not self.conn.hsetnx(self.keys.state, "approval", decision):
            return False
        if reason:
            self.conn.hset(self.keys.state, "approval_reason", reason)
        self.wake("approval")
        return True

    def wake(self, what: str) -> None:
        """Wake a coordinator blocked on the events stream or on the approval list."""
        pipe = self.conn.pipeline(transaction=False)
        pipe.xadd(self.keys.events, {"task_id": WAKE_TASK_ID, "status": f"run.{what}",
                                     "token": "0"})
        pipe.rpush(self.keys.approval, what)
        pipe.execute()

    def wait_for_wake(self, timeout_s: float) -> None:
        """Block until `wake` is called or the timeout passes (the approval wait)."""
        self.conn.blpop([self.keys.approval], timeout=max(0.01, timeout_s))


def list_runs(conn: redis.Redis, limit: int = 50) -> list[str]:
    """The most recent run ids, newest first."""
    return list(conn.zrevrange(RUNS_INDEX, 0, limit - 1))
