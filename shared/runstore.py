"""Run-level records in Redis: the immutable spec, the mutable state hash, the runs index."""

from __future__ import annotations

import time

import redis
from pydantic import BaseModel

from shared.errors import ConfigError
from shared.keys import RUNS_INDEX, RunKeys
from shared.models import Plan, Usage
from shared.team import RunSpec


class RunState(BaseModel):
    """The run's mutable state (one hash)."""

    status: str = "planning"
    rounds: int = 0
    started_ms: int = 0
    ended_ms: int = 0
    output: str | None = None
    error: str | None = None
    plan: Plan | None = None


def now_ms() -> int:
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
        self.conn.hset(self.keys.state, mapping={"status": "planning", "rounds": 0,
                                                 "started_ms": spec.created_ms})
        self.conn.zadd(RUNS_INDEX, {spec.run_id: spec.created_ms})

    def exists(self) -> bool:
        return bool(self.conn.exists(self.keys.spec))

    def spec(self) -> RunSpec:
        raw = self.conn.get(self.keys.spec)
        if raw is None:
            raise ConfigError(f"no run {self.run_id}; `teamctl runs` lists the known runs")
        return RunSpec.model_validate_json(raw)

    def state(self) -> RunState:
        raw = self.conn.hgetall(self.keys.state)
        plan = Plan.model_validate_json(raw["plan"]) if raw.get("plan") else None
        return RunState(
            status=raw.get("status", "unknown"), rounds=int(raw.get("rounds", 0)),
            started_ms=int(raw.get("started_ms", 0)), ended_ms=int(raw.get("ended_ms", 0)),
            output=raw.get("output"), error=raw.get("error") or None, plan=plan)

    def set_status(self, status: str, **extra: str | int) -> None:
        self.conn.hset(self.keys.state, mapping={"status": status, **extra})

    def save_plan(self, plan: Plan) -> None:
        self.conn.hset(self.keys.state, "plan", plan.model_dump_json())

    def set_rounds(self, rounds: int) -> None:
        self.conn.hset(self.keys.state, "rounds", rounds)

    def finish(self, status: str, output: str | None, error: str | None = None) -> None:
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
        raw = self.conn.hgetall(self.keys.usage)
        return Usage(prompt_tokens=int(raw.get("prompt_tokens", 0)),
                     completion_tokens=int(raw.get("completion_tokens", 0)),
                     cost_usd=float(raw.get("cost_usd", 0.0)),
                     unpriced=bool(raw.get("unpriced")))

    def cancelled(self) -> bool:
        return bool(self.conn.exists(self.keys.cancel))


def list_runs(conn: redis.Redis, limit: int = 50) -> list[str]:
    """The most recent run ids, newest first."""
    return list(conn.zrevrange(RUNS_INDEX, 0, limit - 1))
