"""The task board: one Redis hash per task, every transition one Lua script with a fencing token.

Task hash fields: task_id, member_id, task, context, depends_on and dependents (csv), pos (plan
position), deps_left (dependencies not yet completed), status, phase, detail, percent,
heartbeat_count, attempts, token (the fencing token of the last claim: live only while the task
is in progress; 0 once the claim is released, reclaimed or given up on; a task its holder
completed or failed keeps it, so that holder's second write is a CONFLICT, not a stale write),
heartbeat_ttl_ms, stale_writes, claimed_by, worker, start_ms, end_ms, updated_ms,
last_heartbeat_ms, duration_ms, output, error, requeue_reason, and usage_prompt_tokens,
usage_completion_tokens, usage_cost_usd, usage_unpriced (every model call made for the task, by
any attempt; written by shared/budget.py as each call is charged).

Plan order, dependency lists and dependents never change after `create`, so a board object caches
them: a completion then touches only its direct dependents, never the whole board.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from enum import Enum
from functools import cached_property

import redis
from pydantic import TypeAdapter
from teamctl.shared.clock import ttl_ms
from teamctl.shared.errors import ConfigError, unreadable
from teamctl.shared.ids import check_task_id, normalize_id
from teamctl.shared.keys import KeySpace
from teamctl.shared.redis.connection import block_ms, blocking_client
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.task_records import TaskEvent, TaskSpec, TaskState, TaskStatus
from teamctl.shared.text import quoted, shorten

MAX_TASK_ID_CHARS = 128
SNAPSHOT_PAGE_TASKS = 32
SNAPSHOT_PAGE_BYTES = 64 * 1024
"""A snapshot page stops at whichever comes first: each is one script call, kept well under the
5 ms no script may block Redis for."""
SNAPSHOT_FIELDS_PAGE_TASKS = 128
"""A page of some fields of each task (a listing's) holds more tasks: each costs the server
less than a whole hash (128 of 5,000 small tasks: ~0.6 ms, so a loaded host's preemption
still leaves it under 5 ms most of the time)."""
SNAPSHOT_CATCH_UP_ROUNDS = 16
CREATE_PAGE_TASKS = 100
"""A bigger plan is written in pages of this many tasks (create.lua writes a smaller one)."""


class WriteOutcome(Enum):
    """What a fenced write did. Only APPLIED changed the task."""

    APPLIED = "applied"
    STALE = "stale"
    """The caller's token is not the live claim (reclaimed, released or re-claimed by another);
    counted in the task's stale_writes."""
    CONFLICT = "conflict"
    """The token is the task's last one but the claim already ended (a second write by the same
    holder), or a tokenless fail hit a claimed or finished task."""
    NOT_FOUND = "not_found"
    """No such task on this board."""


_VERDICTS = {
    "ok": WriteOutcome.APPLIED,
    "stale": WriteOutcome.STALE,
    "conflict": WriteOutcome.CONFLICT,
    "unknown": WriteOutcome.NOT_FOUND,
}
"""The verdicts of the board's token-checked scripts (check_token in _lib/tasks.lua)."""

STATUS_COUNTS: TypeAdapter[dict[TaskStatus, int]] = TypeAdapter(dict[TaskStatus, int])
"""The counts hash: status -> number of tasks in it."""


def _csv(value: str | None) -> list[str]:
    return [item for item in (value or "").split(",") if item]


def _dependents_in(raw: dict[str, dict[str, str]], task_ids: set[str]) -> set[str]:
    """The direct dependents of `task_ids`, from hashes already read."""
    return {d for t in task_ids for d in _csv(raw.get(t, {}).get("dependents"))}


def _pairs(flat: list[str]) -> dict[str, str]:
    """A flat HGETALL reply from Lua as a dict."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def resolve_task_id(task_id: str | None) -> str | None:
    """AI4J task key resolution ("Task 1" finds task_1); None when it can name no task."""
    # Board ids are normalized already, so normalizing is a no-op for an exact id: AI4J's
    # "exact key first, then normalized" needs no round trip.
    resolved = normalize_id(task_id)
    return resolved if resolved and len(resolved) <= MAX_TASK_ID_CHARS else None


class TaskBoard:
    """The board of one key space (a run's). Each method is one Lua script in shared/redis/lua/board
    (reads: one command)."""

    def __init__(
        self, conn: redis.Redis, keys: KeySpace, scripts: Scripts | GuardedScripts | None = None
    ) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts or Scripts(conn)
        self._ids: list[str] = []
        self._dependents: dict[str, list[str]] = {}

    # --- writes -------------------------------------------------------------------------------

    def create(self, tasks: list[TaskSpec]) -> int:
        """Write a normalized plan; tasks with missing dependencies start blocked. A plan of
        more than CREATE_PAGE_TASKS is written in pages (one script over thousands of tasks
        would block Redis for tens of ms) and made a board in one last step."""
        _check_plan_ids(tasks)
        if len(tasks) > CREATE_PAGE_TASKS:
            return self._create_in_pages(tasks)
        k = self.keys
        payload = [
            json.dumps(
                {
                    "task_id": t.id,
                    "member_id": t.member_id or "",
                    "task": t.task,
                    "context": t.context or "",
                    "depends_on": t.depends_on,
                }
            )
            for t in tasks
        ]
        created = int(
            self.scripts["create"](
                keys=[
                    k.order,
                    k.ready,
                    k.counts,
                    k.events,
                    k.unanswered,
                    *(k.task(t.id) for t in tasks),
                ],
                args=payload,
            )
        )
        self._ids = [t.id for t in tasks]
        return created

    def _create_in_pages(self, tasks: list[TaskSpec]) -> int:
        """create() for a big plan: readiness settled here as create.lua settles it, the task
        hashes written a page per call, then the board made of them in one call."""
        k = self.keys
        statuses, fields = _settled(tasks)
        for at in range(0, len(tasks), CREATE_PAGE_TASKS):
            page = tasks[at : at + CREATE_PAGE_TASKS]
            self.scripts["create_page"](
                keys=[k.order, *(k.task(t.id) for t in page)],
                args=[json.dumps({"fields": fields[t.id], "status": statuses[t.id]}) for t in page],
            )
        ready, blocked = (
            [(str(pos), t.id) for pos, t in enumerate(tasks, 1) if statuses[t.id] == status.value]
            for status in (TaskStatus.READY, TaskStatus.BLOCKED)
        )
        counts = Counter(statuses.values())
        created = int(
            self.scripts["create_commit"](
                keys=[k.order, k.ready, k.counts, k.events, k.unanswered],
                args=[
                    len(tasks),
                    len(ready),
                    len(blocked),
                    *(t.id for t in tasks),
                    *(v for pair in ready for v in pair),
                    *(v for pair in blocked for v in pair),
                    *(v for pair in counts.items() for v in (pair[0], str(pair[1]))),
                ],
            )
        )
        self._ids = [t.id for t in tasks]
        return created

    def claim(self, task_id: str, member_id: str, worker: str, ttl_s: float) -> str | None:
        """Claim a ready task; returns the fencing token (N@EPOCH: see fencing_token in
        _lib/core.lua), or None if it was not ready."""
        task_id = resolve_task_id(task_id) or ""
        if not task_id:
            return None
        k = self.keys
        token, dependents = self.scripts["claim"](
            keys=[
                k.task(task_id),
                k.ready,
                k.running,
                k.counts,
                k.tokens,
                k.heartbeat(task_id),
                k.events,
            ],
            args=[member_id.strip(), worker, ttl_ms(ttl_s)],
        )
        if token == 0:
            return None
        self._dependents[task_id] = _csv(dependents)
        return str(token)

    def heartbeat(
        self,
        task_id: str,
        token: str,
        ttl_s: float,
        *,
        visible: bool = False,
        member_id: str | None = None,
    ) -> WriteOutcome:
        """Extend the claim; `visible` counts it as an AI4J heartbeat (phase "heartbeat")."""
        task_id = resolve_task_id(task_id) or ""
        if not task_id:
            return WriteOutcome.NOT_FOUND
        return write_outcome(
            self.scripts["heartbeat"](
                keys=[self.keys.task(task_id), self.keys.heartbeat(task_id)],
                args=[token, ttl_ms(ttl_s), "1" if visible else "0", (member_id or "").strip()],
            )
        )

    def complete(
        self,
        task_id: str,
        token: str,
        output: str,
        duration_ms: int,
        *,
        announce_as: str | None = None,
    ) -> WriteOutcome:
        """Record the output if `token` still holds the claim; dependents may become ready.

        With `announce_as` (the member's id), the task.result message to lead is published in
        the same atomic step, so no reader sees the task completed without its message.
        """
        task_id = resolve_task_id(task_id) or ""
        if not task_id:
            return WriteOutcome.NOT_FOUND
        k = self.keys
        dependents = [k.task(d) for d in self._direct_dependents(task_id)]
        return write_outcome(
            self.scripts["complete"](
                keys=[*self._ending_keys(task_id), *dependents],
                args=[
                    token,
                    output,
                    duration_ms,
                    shorten(output) or "Task completed.",
                    *_announcement(announce_as, shorten(output)),
                ],
            )
        )

    def fail(
        self,
        task_id: str,
        token: str | None,
        error: str,
        duration_ms: int = 0,
        *,
        announce_as: str | None = None,
    ) -> WriteOutcome:
        """Fail a task (token None: the coordinator fails an unclaimed one); block dependents.

        With `announce_as`, the task.error message (the full error) is published atomically too.
        """
        task_id = resolve_task_id(task_id) or ""
        if not task_id:
            return WriteOutcome.NOT_FOUND
        k = self.keys
        closure = [k.task(d) for d in self._dependents_closure(task_id)]
        return write_outcome(
            self.scripts["fail"](
                keys=[*self._ending_keys(task_id), k.unanswered, *closure],
                args=[
                    "" if token is None else token,
                    error,
                    duration_ms,
                    shorten(error) or "Task failed.",
                    *_announcement(announce_as, error),
                ],
            )
        )

    def _ending_keys(self, task_id: str) -> list[str]:
        """The keys complete.lua and fail.lua take first, in their headers' order: the task, the
        board's sets and counts, its heartbeat, and the streams the outcome is announced on."""
        k = self.keys
        return [
            k.task(task_id),
            k.ready,
            k.running,
            k.counts,
            k.heartbeat(task_id),
            k.events,
            k.bus,
            k.bus_seq,
        ]

    def release(self, task_id: str, token: str, reason: str | None = None) -> WriteOutcome:
        """Give a claim back: ready (or pending) again, and `token` is revoked for good."""
        task_id = resolve_task_id(task_id) or ""
        if not task_id:
            return WriteOutcome.NOT_FOUND
        k = self.keys
        return write_outcome(
            self.scripts["release"](
                keys=[
                    k.task(task_id),
                    k.ready,
                    k.running,
                    k.counts,
                    k.heartbeat(task_id),
                    k.events,
                ],
                args=[token, (reason or "").strip()],
            )
        )

    def release_for_budget(self, task_id: str, token: str, reason: str) -> WriteOutcome:
        """Give a claim back because the budget cannot cover its next call: not counted as an
        attempt or a release, and its journal kept for the next attempt to replay."""
        k = self.keys
        return write_outcome(
            self.scripts["release_budget"](
                keys=[
                    k.task(task_id),
                    k.ready,
                    k.running,
                    k.counts,
                    k.heartbeat(task_id),
                    k.events,
                ],
                args=[token, reason],
            )
        )

    def reassign(self, task_id: str, token: str, to_member_id: str) -> WriteOutcome:
        """Hand the claim to another member; the token stays valid (its worker keeps running)."""
        task_id = resolve_task_id(task_id) or ""
        to_member_id = to_member_id.strip()
        if not to_member_id:
            raise ValueError("to_member_id is required")
        if not task_id:
            return WriteOutcome.NOT_FOUND
        k = self.keys
        return write_outcome(
            self.scripts["reassign"](
                keys=[k.task(task_id), k.heartbeat(task_id), k.events], args=[token, to_member_id]
            )
        )

    def block_stalled(self, reason: str) -> int:
        """Block every pending or ready task with `reason`; returns how many were blocked."""
        k = self.keys
        task_keys = [k.task(t) for t in self.task_ids()]
        if not task_keys:
            return 0
        return int(
            self.scripts["block_stalled"](
                keys=[k.ready, k.counts, k.events, k.unanswered, *task_keys], args=[reason]
            )
        )

    def reclaim_expired(self, max_attempts: int, *, announce_failures: bool = False) -> list[str]:
        """Reclaim in-progress tasks whose heartbeat key is gone; returns their ids.

        With `announce_failures`, a task failed after `max_attempts` gets its task.error message
        (from the member that held it) in the same step, like a failure the member reports.
        """
        return self._reclaim(self._expired_claims(), max_attempts, announce_failures, "")

    def fail_in_progress(self, reason: str, *, announce_failures: bool = False) -> list[str]:
        """Fail every in-progress task with `reason`, live claims included (their tokens are
        revoked); a stopped run gives up on members that outlasted its grace period."""
        running = sorted(self.conn.smembers(self.keys.running))
        return self._reclaim(running, 1, announce_failures, reason or "stopped")

    def _reclaim(
        self, task_ids: list[str], max_attempts: int, announce_failures: bool, forced_reason: str
    ) -> list[str]:
        if not task_ids:
            return []
        k = self.keys
        keys: list[str] = [k.ready, k.running, k.counts, k.events, k.bus, k.bus_seq, k.unanswered]
        sizes: list[int] = []
        for task_id in task_ids:
            closure = self._dependents_closure(task_id)
            keys += [k.task(task_id), k.heartbeat(task_id), *(k.task(d) for d in closure)]
            sizes.append(len(closure))
        announce = "1" if announce_failures else ""
        return list(
            self.scripts["reclaim"](keys=keys, args=[max_attempts, announce, forced_reason, *sizes])
        )

    # --- reads --------------------------------------------------------------------------------

    @cached_property
    def blocking_conn(self) -> redis.Redis:
        """Connections of their own for XREAD BLOCK, with a socket timeout that outlasts it."""
        return blocking_client(self.conn)

    def read_events(self, after_id: str, count: int, wait_ms: int | None) -> list[TaskEvent]:
        """Task state changes after `after_id`, in order; waits up to `wait_ms` (capped at
        MAX_BLOCK_MS) for the first (None: do not wait)."""
        streams = {self.keys.events: after_id}
        reply = (
            self.conn.xread(streams, count=count)
            if wait_ms is None
            else self.blocking_conn.xread(streams, count=count, block=block_ms(wait_ms))
        )
        entries = reply[0][1] if reply else []
        return [
            TaskEvent.model_validate({"id": entry_id, **fields}) for entry_id, fields in entries
        ]

    def next_ready(self, n: int) -> list[str]:
        """The first `n` ready task ids in plan order (n <= 0 means 1, as AI4J)."""
        return list(self.scripts["next_ready"](keys=[self.keys.ready], args=[n]))

    def get(self, task_id: str) -> TaskState | None:
        """One task's state, or None if the id names no task."""
        task_id = resolve_task_id(task_id) or ""
        raw = self.conn.hgetall(self.keys.task(task_id)) if task_id else {}
        return self.parse(raw) if raw else None

    def get_many(self, task_ids: list[str]) -> list[TaskState]:
        """The states of existing tasks among `task_ids`, in that order (one round trip)."""
        ids = [t for t in (resolve_task_id(t) for t in task_ids) if t]
        pipe = self.conn.pipeline(transaction=False)
        for task_id in ids:
            pipe.hgetall(self.keys.task(task_id))
        return [self.parse(raw) for raw in pipe.execute() if raw]

    def task_ids(self) -> list[str]:
        """Task ids in plan order."""
        if not self._ids:
            self._ids = list(self.conn.lrange(self.keys.order, 0, -1))
        return self._ids

    def snapshot(self, fields: Sequence[str] = ()) -> list[TaskState]:
        """Every task in plan order, as the board stood at one instant (no half-applied
        transition is visible), read in pages so no script blocks Redis for long. With
        `fields`, only those of each task are read (a listing's: the rest keep their
        defaults), in bigger pages."""
        return [self.parse(raw) for raw in self.snapshot_hashes(fields)]

    def snapshot_hashes(self, fields: Sequence[str] = ()) -> list[dict[str, str]]:
        """snapshot()'s task hashes as read, in plan order (a persistent team's board parses
        them as its own tasks)."""
        ids = self.task_ids()
        if not ids:
            return []
        # Catching up follows each touched task's dependents: a partial read needs them.
        fields = [*fields, "dependents"] if fields and "dependents" not in fields else fields
        raw, since, until, one_call = self._read_pages(ids, fields)
        reread = set(ids) if one_call else set()
        # Tasks a transition touched since the previous read are read again, with their
        # dependents (the next transitions land there). The view is one instant's once a read
        # made in one script call covered every task touched since the read before it. Past
        # the rounds each task is still whole, but the tasks may stand at different instants
        # (a board that changes faster than it can be read).
        for _ in range(SNAPSHOT_CATCH_UP_ROUNDS):
            touched = self._touched_between(since, until, raw)
            if not touched or touched <= reread:
                break
            wanted = touched | _dependents_in(raw, touched)
            again, _, later, one_call = self._read_pages(sorted(wanted), fields)
            raw.update(again)
            since, until, reread = until, later, wanted if one_call else set()
        return [raw[t] for t in ids if raw.get(t)]

    def _read_pages(
        self, task_ids: list[str], fields: Sequence[str]
    ) -> tuple[dict[str, dict[str, str]], str, str, bool]:
        """The hashes of `task_ids` by id (`fields` of each, or whole); the events stream's last
        id at the first page and at the last; whether one script call read them all."""
        raw: dict[str, dict[str, str]] = {}
        marks: list[str] = []
        at = 0
        size = SNAPSHOT_FIELDS_PAGE_TASKS if fields else SNAPSHOT_PAGE_TASKS
        while at < len(task_ids):
            page = task_ids[at : at + size]
            reply = self.scripts["snapshot_page"](
                keys=[self.keys.events, *(self.keys.task(t) for t in page)],
                args=[SNAPSHOT_PAGE_BYTES, *fields],
            )
            marks.append(str(reply[0]))
            read = int(reply[1])
            raw.update(zip(page[:read], (_pairs(flat) for flat in reply[2:]), strict=True))
            at += read
        return raw, marks[0], marks[-1], len(marks) == 1

    def _touched_between(self, since: str, until: str, raw: dict[str, dict[str, str]]) -> set[str]:
        """Tasks a transition touched after mark `since` up to `until`: each event's task and
        its direct dependents (a completion readies them without an event of their own); every
        task when there were more events than one stream read returns."""
        if since == until:
            return set()
        limit = len(raw) + SNAPSHOT_PAGE_TASKS
        # Inclusive of `since` (an exclusive range needs Redis 6.2), which is dropped here.
        entries = self.conn.xrange(self.keys.events, min=since or "-", max=until, count=limit + 1)
        entries = [(entry_id, fields) for entry_id, fields in entries if entry_id != since]
        if len(entries) >= limit:
            return set(self.task_ids())
        touched = {t for _, fields in entries if (t := fields.get("task_id"))}
        return touched | _dependents_in(raw, touched)

    def counts(self) -> dict[TaskStatus, int]:
        """Number of tasks per status; statuses no task has are absent."""
        counts = STATUS_COUNTS.validate_python(self.conn.hgetall(self.keys.counts))
        return {status: n for status, n in counts.items() if n > 0}

    def has_work_remaining(self) -> bool:
        """True while any task is pending, ready or in progress (AI4J hasWorkRemaining)."""
        counts = self.counts()
        return any(
            counts.get(s, 0) > 0
            for s in (TaskStatus.PENDING, TaskStatus.READY, TaskStatus.IN_PROGRESS)
        )

    # --- dependency index ---------------------------------------------------------------------

    def parse(self, raw: dict[str, str]) -> TaskState:
        """A task hash, whole or some of its fields, as a TaskState, its dependents remembered
        when read; UnreadableRecord if corrupt."""
        try:
            state = TaskState.from_hash(raw)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise unreadable(
                f"{self.keys.label} is unreadable: task {quoted(raw.get('task_id'))}", exc
            ) from exc
        if "dependents" in raw:  # a partial read says nothing of them
            self._dependents[state.task_id] = state.dependents
        return state

    def _direct_dependents(self, task_id: str) -> list[str]:
        if task_id not in self._dependents:
            self._fetch_dependents([task_id])
        return self._dependents.get(task_id, [])

    def _fetch_dependents(self, task_ids: list[str]) -> None:
        """Load the dependents of the tasks not cached yet, in one pipelined round trip."""
        missing = [t for t in task_ids if t not in self._dependents]
        if not missing:
            return
        pipe = self.conn.pipeline(transaction=False)
        for task_id in missing:
            pipe.hget(self.keys.task(task_id), "dependents")
        for task_id, raw in zip(missing, pipe.execute(), strict=True):
            self._dependents[task_id] = _csv(raw)

    def _dependents_closure(self, task_id: str) -> list[str]:
        """Everything that depends on the task, transitively (one round trip per level at most)."""
        seen: dict[str, None] = {}
        frontier = self._direct_dependents(task_id)
        while frontier:
            fresh = list(dict.fromkeys(d for d in frontier if d not in seen and d != task_id))
            seen.update(dict.fromkeys(fresh))
            self._fetch_dependents(fresh)
            frontier = [d for f in fresh for d in self._dependents.get(f, [])]
        return list(seen)

    def _expired_claims(self) -> list[str]:
        """Running tasks whose heartbeat key is gone (the reclaim script checks again)."""
        running = sorted(self.conn.smembers(self.keys.running))
        if not running:
            return []
        pipe = self.conn.pipeline(transaction=False)
        for task_id in running:
            pipe.exists(self.keys.heartbeat(task_id))
        return [t for t, alive in zip(running, pipe.execute(), strict=True) if not alive]


def _check_plan_ids(tasks: list[TaskSpec]) -> None:
    """A plan reaching the board is normalized: unique ids, dependency ids safe for the csv."""
    seen: set[str] = set()
    for task in tasks:
        for task_id in (task.id, *task.depends_on):
            check_task_id(task_id)
        if task.id in seen:
            raise ConfigError(f"duplicate task id {task.id!r}: normalize the plan first")
        seen.add(task.id)


MISSING_DEPENDENCY = ("Blocked: missing dependency.", "missing dependency")
DEPENDENCY_FAILED = ("Blocked: dependency failed.", "dependency failed")


def _settled(tasks: list[TaskSpec]) -> tuple[dict[str, str], dict[str, dict[str, object]]]:
    """Each task's status and hash fields on a new board, as create.lua settles them: in plan
    order, the first missing or blocked dependency blocks a task; then "dependency failed"
    spreads to every pending dependent of a blocked task, transitively."""
    known = {t.id for t in tasks}
    dependents: dict[str, list[str]] = {}
    for task in tasks:
        for dep in task.depends_on:
            if dep in known:
                dependents.setdefault(dep, []).append(task.id)
    status: dict[str, str] = {}
    blocked: dict[str, tuple[str, str]] = {}
    for task in tasks:
        for dep in task.depends_on:
            if dep not in known or dep in blocked:
                blocked[task.id] = MISSING_DEPENDENCY if dep not in known else DEPENDENCY_FAILED
                break
        status[task.id] = (
            "blocked" if task.id in blocked else "pending" if task.depends_on else "ready"
        )
    queue = list(blocked)
    while queue:
        for dep_id in dependents.get(queue.pop(), []):
            if status[dep_id] == "pending":
                status[dep_id], blocked[dep_id] = "blocked", DEPENDENCY_FAILED
                queue.append(dep_id)
    fields: dict[str, dict[str, object]] = {}
    for pos, task in enumerate(tasks, 1):
        fields[task.id] = {
            "task_id": task.id,
            "member_id": task.member_id or "",
            "task": task.task,
            "context": task.context or "",
            "depends_on": ",".join(task.depends_on),
            "dependents": ",".join(dependents.get(task.id, [])),
            "pos": pos,
            "deps_left": len(task.depends_on),
            "percent": 0,
            "heartbeat_count": 0,
            "attempts": 0,
            "token": 0,
            "stale_writes": 0,
            "claimed_by": "",
            "worker": "",
            "output": "",
            "error": "",
            "requeue_reason": "",
            **_status_fields(status[task.id], blocked.get(task.id)),
        }
    return status, fields


def _status_fields(status: str, blocker: tuple[str, str] | None) -> dict[str, object]:
    """The fields make_ready, make_pending and block (shared/redis/lua/_lib/tasks.lua) set at
    creation."""
    if status == "ready":
        return {"phase": "ready", "detail": "Ready for dispatch.", "error": "", "percent": 5}
    if status == "pending":
        return {"phase": "pending", "detail": "Waiting for dependencies.", "error": ""}
    detail, error = blocker or DEPENDENCY_FAILED
    return {"phase": "blocked", "detail": detail, "error": error, "percent": 100}


def _announcement(sender: str | None, content: str) -> list[str]:
    """The ARGV tail of complete/fail: who announces the outcome to lead, and what."""
    return [sender or "", content]


def write_outcome(verdict: str) -> WriteOutcome:
    """The outcome a token-checked script's verdict names."""
    return _VERDICTS[verdict]
