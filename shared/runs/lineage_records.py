"""A replayed or forked run's records of what it reuses, and each run's list of the runs made from
it, in Redis."""

from __future__ import annotations

import redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.lineage import TaskReuse

MARK = "_"
"""Reuse hash fields that are not task ids start with it (task ids cannot)."""
SEEDED_FIELD = f"{MARK}seeded"
"""The marker that the source's journals and transcripts were copied (a resumed coordinator
skips the copy)."""
REUSED_CALL_FIELD = f"{MARK}call:"
"""A field per planner or synthesizer reply taken from the source: counted once however often a
resumed coordinator takes it."""
WRITE_PAGE = 200
"""Reuse entries per HSET."""


class LineageRecords:
    """A run's reuse entries, what of them its coordinator did, and the runs made from it."""

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
            if not str(task_id).startswith(MARK)
        }

    def seeded(self) -> bool:
        """Whether the source's journals and transcripts were copied into this run."""
        return bool(self.conn.hexists(self.keys.reuse, SEEDED_FIELD))

    def mark_seeded(self) -> None:
        self.conn.hset(self.keys.reuse, SEEDED_FIELD, "1")

    def note_reused_call(self, call: str) -> None:
        """The planner's or synthesizer's reply was taken from the source instead of asked for."""
        self.conn.hset(self.keys.reuse, REUSED_CALL_FIELD + call, "1")

    def reused_calls(self) -> int:
        """The planner and synthesizer calls this run took from its source."""
        fields = [REUSED_CALL_FIELD + call for call in ("planner", "synthesizer")]
        return sum(value is not None for value in self.conn.hmget(self.keys.reuse, fields))

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
        """The runs replayed or forked from this one that still exist, sorted (ids sort by
        creation time)."""
        named = sorted(str(run_id) for run_id in self.conn.smembers(self.keys.forks))
        pipe = self.conn.pipeline(transaction=False)
        for run_id in named:
            pipe.exists(RunKeys(run_id).spec)
        return [run_id for run_id, there in zip(named, pipe.execute(), strict=True) if there]
