"""Where a replayed or forked run comes from, and what each of its tasks takes from the source
run's records (its output, or the first steps of its journal), so the new run pays only for what
changed and runs every reused step through the current code."""

from __future__ import annotations

from typing import Literal

import redis
from pydantic import BaseModel
from teamctl.shared.keys import RunKeys

SEEDED_FIELD = "_seeded"
"""The reuse hash's marker that the journals it names were copied (a resumed coordinator skips
the copy)."""
REUSED_CALLS_FIELD = "reused_calls"
"""The run state's count of the planner and synthesizer calls it took from its source."""
WRITE_PAGE = 200
"""Reuse entries per HSET."""


class Lineage(BaseModel):
    """A run made from another run's records: a replay (everything recorded), or a fork at a
    point (`plan`, `TASK` or `TASK:STEP`) with changes."""

    kind: Literal["replay", "fork"]
    source_run: str
    at: str | None = None
    """The fork point as given (`plan`, `t2`, `t2:3`); None for a replay."""

    @property
    def reuses_plan(self) -> bool:
        """Whether the plan is the source's (everything but a fork at `plan`)."""
        return self.at != "plan"

    def text(self) -> str:
        """`replay of R` or `forked from R at t2:3`."""
        if self.kind == "replay":
            return f"replay of {self.source_run}"
        return f"forked from {self.source_run} at {self.at}"


class TaskReuse(BaseModel):
    """What one task of a replayed or forked run takes from the same task of its source."""

    output: str | None = None
    """Kept: the task completes with this output, without a session (it does not depend on the
    fork point)."""
    steps: int = 0
    """How many steps of the source's journal the session replays before it goes on live."""
    strict: bool = False
    """A replay's: a model call past the replayed steps is a divergence, never made."""
    source_error: str | None = None
    """The source task failed with this: a strict replay that runs out of steps fails the same
    way instead of diverging."""


class LineageRecords:
    """A run's reuse entries and the runs made from it, in Redis."""

    def __init__(self, conn: redis.Redis, keys: RunKeys) -> None:
        self.conn = conn
        self.keys = keys

    def save_reuse(self, entries: dict[str, TaskReuse]) -> None:
        """Store what each task reuses (in pages: a 1,000-task fork is no single long call)."""
        items = [(task_id, entry.model_dump_json()) for task_id, entry in entries.items()]
        pipe = self.conn.pipeline(transaction=False)
        for at in range(0, len(items), WRITE_PAGE):
            pipe.hset(self.keys.reuse, mapping=dict(items[at : at + WRITE_PAGE]))
        pipe.execute()

    def reuse_for(self, task_id: str) -> TaskReuse | None:
        """What this task reuses, or None (it runs live)."""
        raw = self.conn.hget(self.keys.reuse, task_id)
        return None if raw is None else TaskReuse.model_validate_json(raw)

    def reuse(self) -> dict[str, TaskReuse]:
        """Every task's reuse entry."""
        return {
            str(task_id): TaskReuse.model_validate_json(raw)
            for task_id, raw in self.conn.hscan_iter(self.keys.reuse)
            if task_id != SEEDED_FIELD
        }

    def seeded(self) -> bool:
        return bool(self.conn.hexists(self.keys.reuse, SEEDED_FIELD))

    def mark_seeded(self) -> None:
        self.conn.hset(self.keys.reuse, SEEDED_FIELD, "1")

    def count_reused_call(self) -> None:
        """A planner or synthesizer reply taken from the source instead of asked for."""
        self.conn.hincrby(self.keys.state, REUSED_CALLS_FIELD, 1)

    def reused_calls(self) -> int:
        """The planner and synthesizer calls this run took from its source."""
        return int(self.conn.hget(self.keys.state, REUSED_CALLS_FIELD) or 0)

    def add_fork(self, fork_id: str) -> None:
        """Name `fork_id` among this run's forks, expiring with this run (an ended run has a TTL
        its new key must share, or it would outlive the run)."""
        ttl_ms = int(self.conn.pttl(self.keys.state))
        pipe = self.conn.pipeline(transaction=True)
        pipe.sadd(self.keys.forks, fork_id)
        if ttl_ms > 0:
            pipe.pexpire(self.keys.forks, ttl_ms)
        pipe.execute()

    def forks(self) -> list[str]:
        """The runs replayed or forked from this one, sorted (ids sort by creation time)."""
        return sorted(str(run_id) for run_id in self.conn.smembers(self.keys.forks))
