"""The task board: one Redis hash per task, every transition one Lua script with a fencing token."""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import Enum

import redis

from shared.keys import RunKeys
from shared.models import TaskSpec, TaskState, TaskStatus, Usage
from shared.scripts import Scripts

STALE = -1


class WriteOutcome(Enum):
    """What a fenced write did: applied, or refused because the caller's claim is gone."""

    APPLIED = "applied"
    STALE = "stale"


_INT_FIELDS = ("percent", "heartbeat_count", "attempts", "stale_writes", "start_ms", "end_ms",
               "updated_ms", "last_heartbeat_ms", "duration_ms")


def _parse_task(raw: dict[str, str]) -> TaskState:
    """Turn a task hash into a TaskState (empty strings are absent values)."""
    usage = Usage.model_validate_json(raw["usage"]) if raw.get("usage") else Usage()
    token = raw.get("token", "0")
    return TaskState(
        task_id=raw["task_id"],
        member_id=raw.get("member_id") or None,
        task=raw.get("task", ""),
        context=raw.get("context") or None,
        depends_on=[d for d in raw.get("depends_on", "").split(",") if d],
        status=TaskStatus(raw["status"]),
        claimed_by=raw.get("claimed_by") or None,
        worker=raw.get("worker") or None,
        phase=raw.get("phase", ""),
        detail=raw.get("detail") or None,
        token=int(token) if token.isdigit() else 0,
        output=raw.get("output") or None,
        error=raw.get("error") or None,
        usage=usage,
        **{name: int(raw.get(name) or 0) for name in _INT_FIELDS},
    )


class TaskBoard:
    """The board of one run. Methods map one-to-one to Lua scripts in shared/lua."""

    def __init__(self, conn: redis.Redis, run_id: str, scripts: Scripts | None = None) -> None:
        self.conn = conn
        self.keys = RunKeys(run_id)
        self.scripts = scripts or Scripts(conn)

    # --- writes -------------------------------------------------------------------------------

    def create(self, tasks: list[TaskSpec]) -> int:
        """Write a normalized plan; tasks with missing dependencies start blocked."""
        k = self.keys
        payload = [
            json.dumps({"task_id": t.id, "member_id": t.member_id or "", "task": t.task,
                        "context": t.context or "", "depends_on": t.depends_on})
            for t in tasks
        ]
        task_keys = [k.task(t.id) for t in tasks]
        return int(self.scripts["create"](
            keys=[k.order, k.ready, k.counts, k.events, *task_keys], args=payload))

    def claim(self, task_id: str, member_id: str, worker: str, ttl_s: float) -> int | None:
        """Claim a ready task; returns the fencing token, or None if it was not ready."""
        k = self.keys
        token = int(self.scripts["claim"](
            keys=[k.task(task_id), k.ready, k.running, k.counts, k.tokens, k.heartbeat(task_id),
                  k.events],
            args=[member_id, worker, int(ttl_s * 1000)]))
        return token or None

    def heartbeat(self, task_id: str, token: int, ttl_s: float, *, visible: bool = False,
                  member_id: str = "member") -> WriteOutcome:
        """Extend the claim; `visible` counts it as an AI4J heartbeat (phase "heartbeat")."""
        k = self.keys
        code = self.scripts["heartbeat"](
            keys=[k.task(task_id), k.heartbeat(task_id)],
            args=[token, int(ttl_s * 1000), "1" if visible else "0", member_id])
        return _outcome(code)

    def complete(self, task_id: str, token: int, output: str, duration_ms: int,
                 usage: Usage | None = None) -> WriteOutcome:
        """Record the output if `token` still holds the claim; dependents may become ready."""
        k = self.keys
        dependents = [k.task(d) for d in self._dependents(task_id)]
        code = self.scripts["complete"](
            keys=[k.task(task_id), k.ready, k.running, k.counts, k.heartbeat(task_id), k.events,
                  *dependents],
            args=[token, output, duration_ms, (usage or Usage()).model_dump_json()])
        return _outcome(code)

    def fail(self, task_id: str, token: int | None, error: str, duration_ms: int = 0,
             usage: Usage | None = None) -> WriteOutcome:
        """Fail a task (token None: the coordinator fails an unclaimed one); block dependents."""
        k = self.keys
        closure = [k.task(d) for d in self._dependents_closure(task_id)]
        code = self.scripts["fail"](
            keys=[k.task(task_id), k.ready, k.running, k.counts, k.heartbeat(task_id), k.events,
                  *closure],
            args=["" if token is None else token, error, duration_ms,
                  (usage or Usage()).model_dump_json()])
        return _outcome(code)

    def block_stalled(self, reason: str) -> int:
        """Block every pending or ready task with `reason`; returns how many were blocked."""
        k = self.keys
        candidates = [k.task(t.task_id) for t in self.snapshot() if not t.terminal
                      and t.status != TaskStatus.IN_PROGRESS]
        if not candidates:
            return 0
        return int(self.scripts["block_stalled"](
            keys=[k.ready, k.counts, k.events, *candidates], args=[reason]))

    def reclaim_expired(self, max_attempts: int) -> list[str]:
        """Reclaim in-progress tasks whose heartbeat key is gone; returns their ids."""
        k = self.keys
        running = sorted(self.conn.smembers(k.running))
        if not running:
            return []
        pipe = self.conn.pipeline(transaction=False)
        for task_id in running:
            pipe.exists(k.heartbeat(task_id))
        expired = [t for t, alive in zip(running, pipe.execute(), strict=True) if not alive]
        reclaimed = []
        for task_id in expired:
            closure = [k.task(d) for d in self._dependents_closure(task_id)]
            code = self.scripts["reclaim"](
                keys=[k.task(task_id), k.ready, k.running, k.counts, k.heartbeat(task_id),
                      k.events, *closure],
                args=[max_attempts])
            if int(code):
                reclaimed.append(task_id)
        return reclaimed

    # --- reads --------------------------------------------------------------------------------

    def next_ready(self, n: int) -> list[str]:
        """The first `n` ready task ids in plan order."""
        return list(self.conn.zrange(self.keys.ready, 0, max(1, n) - 1))

    def get(self, task_id: str) -> TaskState | None:
        raw = self.conn.hgetall(self.keys.task(task_id))
        return _parse_task(raw) if raw else None

    def task_ids(self) -> list[str]:
        return list(self.conn.lrange(self.keys.order, 0, -1))

    def snapshot(self) -> list[TaskState]:
        """Every task in plan order (one pipelined round trip)."""
        ids = self.task_ids()
        pipe = self.conn.pipeline(transaction=False)
        for task_id in ids:
            pipe.hgetall(self.keys.task(task_id))
        return [_parse_task(raw) for raw in pipe.execute() if raw]

    def counts(self) -> dict[TaskStatus, int]:
        raw = self.conn.hgetall(self.keys.counts)
        return {TaskStatus(s): int(n) for s, n in raw.items() if s in TaskStatus._value2member_map_}

    def has_work_remaining(self) -> bool:
        counts = self.counts()
        return any(counts.get(s, 0) > 0 for s in
                   (TaskStatus.PENDING, TaskStatus.READY, TaskStatus.IN_PROGRESS))

    def _dependents(self, task_id: str) -> list[str]:
        raw = self.conn.hget(self.keys.task(task_id), "dependents") or ""
        return [d for d in raw.split(",") if d]

    def _dependents_closure(self, task_id: str) -> list[str]:
        """Everything that depends on the task, transitively (one round trip per level)."""
        seen: dict[str, None] = {}
        frontier = self._dependents(task_id)
        while frontier:
            fresh = [d for d in frontier if d not in seen and d != task_id]
            seen.update(dict.fromkeys(fresh))
            frontier = _flatten(self.conn.hmget(self.keys.task(d), "dependents")[0] or ""
                                for d in fresh) if fresh else []
        return list(seen)


def _flatten(csv_values: Iterable[str]) -> list[str]:
    return [item for value in csv_values for item in value.split(",") if item]


def _outcome(code: object) -> WriteOutcome:
    return WriteOutcome.STALE if int(code) == STALE else WriteOutcome.APPLIED
