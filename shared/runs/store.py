"""Run-level records in Redis: the immutable spec, the mutable state hash, the runs index."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

import redis
from pydantic import BaseModel, BeforeValidator
from teamctl.shared.agent.replies import Usage
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import ConfigError, RunFailed, UnreadableRecord, unreadable
from teamctl.shared.ids import is_safe_id
from teamctl.shared.keys import RUNS_INDEX, RUNS_STARTED, RunKeys
from teamctl.shared.redis.connection import block_ms, blocking_client
from teamctl.shared.redis.hash_fields import BLANK_IS_NONE, HashInt, HashText
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.roster import queue_roster
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.run_records import Approval, RunStatus, Wake
from teamctl.shared.task_records import Plan

RUNS_STARTED_KEPT = 1000
"""Entries the runs-started stream keeps: a reader only needs those since its page loaded."""
RECENT_PAGE = 50
"""Index entries `recent_runs` reads at a time."""
WAKE_TASK_ID = ""
"""Events with an empty task id are wake-ups for the coordinator (cancel, approval), not board
changes."""


@dataclass(frozen=True)
class RunEnd:
    """How a run ends: written in one fenced step by RunStore.finish."""

    status: RunStatus
    retention_s: float
    output: str | None = None
    error: str | None = None
    usage: Usage | None = None
    """The last model call's usage (the synthesizer's), counted only if this end is written."""
    announce: SystemType | None = None
    """The notice to publish to lead (run.complete, run.failed...), None for none."""
    announce_text: str = ""


def _plan_json(value: object) -> object:
    """The hash stores the plan as JSON text ('' or absent: no plan yet)."""
    if value == "":
        return None
    return json.loads(value) if isinstance(value, str) else value


class RunState(BaseModel):
    """The run's mutable state (one hash)."""

    status: RunStatus = RunStatus.PLANNING
    rounds: HashInt = 0
    started_ms: HashInt = 0
    ended_ms: HashInt = 0
    output: str | None = None
    """Kept as stored: an empty output is an output (run_finish.lua writes it only if there is
    one)."""
    error: HashText = None
    plan: Annotated[Plan | None, BeforeValidator(_plan_json)] = None
    approval: Annotated[Approval | None, BLANK_IS_NONE] = None
    """Set once somebody decided on the plan."""
    approval_reason: HashText = None
    traceparent: HashText = None
    """The run's trace (W3C traceparent of its first coordinator's span), when traced: every
    process, a resuming coordinator too, puts its spans in that trace."""

    @property
    def finished(self) -> bool:
        return self.status.finished


class RunStore:
    """Reads and writes one run's spec and state; status writes are fenced by the coordinator
    lease `lease_owner` holds, so only the coordinator driving the run moves it."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: RunKeys,
        lease_owner: str | None = None,
        scripts: Scripts | None = None,
    ) -> None:
        self.conn = conn
        self.run_id = keys.run_id
        self.keys = keys
        self.lease_owner = lease_owner
        self._scripts = scripts

    def create(self, spec: RunSpec) -> None:
        """Store the spec once (a second run with the same id is refused), then the state, the
        roster its bus reads and the index entry together."""
        if not self.conn.set(self.keys.spec, spec.model_dump_json(), nx=True):
            raise ConfigError(f"run {spec.run_id} already exists; pass another --run-id")
        pipe = self.conn.pipeline(transaction=True)
        pipe.hset(
            self.keys.state,
            mapping={"status": RunStatus.PLANNING, "rounds": 0, "started_ms": spec.created_ms},
        )
        # A run's roster never changes; it is kept the way a team's is, so one bus serves both.
        queue_roster(pipe, self.keys, [m.id for m in spec.members])
        pipe.zadd(RUNS_INDEX, {spec.run_id: spec.created_ms})
        pipe.xadd(RUNS_STARTED, {"run_id": spec.run_id}, maxlen=RUNS_STARTED_KEPT, approximate=True)
        pipe.execute()

    def exists(self) -> bool:
        """Whether the run was ever created (its spec is stored)."""
        return bool(self.conn.exists(self.keys.spec))

    def spec(self) -> RunSpec:
        """The run's immutable spec; ConfigError names `teamctl runs` if there is none."""
        raw = self.conn.get(self.keys.spec)
        if raw is None:
            raise ConfigError(f"no run {self.run_id}; `teamctl runs` lists the known runs")
        return parse_spec(self.run_id, raw)

    def state(self) -> RunState:
        """The run's mutable state, parsed from its hash."""
        return parse_state(self.run_id, self.conn.hgetall(self.keys.state))

    def status(self) -> RunStatus:
        """The run's status alone: a listing of its tasks needs neither its plan (the bulk of
        a big run's state) nor its answer."""
        raw = self.conn.hget(self.keys.state, "status")
        return parse_state(self.run_id, {} if raw is None else {"status": raw}).status

    def set_status(self, status: RunStatus) -> None:
        """Move the run to a status that does not end it; RunFailed if the lease is not ours."""
        self._check_fenced(
            self.scripts["run_status"](
                keys=[self.keys.lease, self.keys.state], args=[self._owner(), status]
            )
        )

    def save_plan(self, plan: Plan) -> None:
        """Store the normalized plan (made once; resume reuses it)."""
        self.conn.hset(self.keys.state, "plan", plan.model_dump_json())

    def keep_traceparent(self, traceparent: str) -> str:
        """Store the run's trace unless one is stored; the one stored."""
        if self.conn.hsetnx(self.keys.state, "traceparent", traceparent):
            return traceparent
        return str(self.conn.hget(self.keys.state, "traceparent") or traceparent)

    def set_rounds(self, rounds: int) -> None:
        """Record how many rounds have been dispatched so far."""
        self.conn.hset(self.keys.state, "rounds", rounds)

    def finish(self, end: RunEnd) -> None:
        """End the run in one step fenced by the lease (state, usage, announcement, expiry of
        the first keys); RunFailed if the lease is not ours or the run already ended."""
        usage = end.usage or Usage()
        self._check_fenced(
            self.scripts["run_finish"](
                keys=[
                    self.keys.lease,
                    self.keys.state,
                    self.keys.usage,
                    self.keys.bus,
                    self.keys.bus_seq,
                    self.keys.events,
                ],
                args=[
                    self._owner(),
                    end.status,
                    end.output or "",
                    int(end.output is not None),
                    end.error or "",
                    usage.prompt_tokens,
                    usage.completion_tokens,
                    repr(float(usage.cost_usd)),
                    int(usage.unpriced),
                    end.announce or "",
                    end.announce_text,
                    max(1, int(end.retention_s * 1000)),
                ],
            )
        )

    @cached_property
    def scripts(self) -> Scripts:
        """The Lua scripts, loaded on first use: most readers of a run never need them."""
        return self._scripts or Scripts(self.conn)

    def _owner(self) -> str:
        if self.lease_owner is None:
            raise RunFailed(
                f"run {self.run_id}: only the coordinator holding its lease may change its status"
            )
        return self.lease_owner

    def _check_fenced(self, verdict: str) -> None:
        """Raise unless run_status.lua or run_finish.lua wrote ('ok')."""
        if verdict == "stale":
            raise RunFailed(
                f"lost the lease on run {self.run_id} (cut off from Redis longer "
                "than lease_ttl_s, or another coordinator took over); this one "
                "stops without writing"
            )
        if verdict == "ended":
            raise RunFailed(
                f"run {self.run_id} was already ended by another coordinator; "
                f"`teamctl status {self.run_id}` shows its result"
            )
        if verdict != "ok":  # a script of another teamctl version: do not take it as written
            raise RunFailed(
                f"run {self.run_id}: Redis answered {verdict!r} to a status write; "
                "run every coordinator and worker on the same teamctl version"
            )

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
        return parse_usage(self.run_id, self.conn.hgetall(self.keys.usage))

    def cancelled(self) -> bool:
        """Whether somebody asked the run to stop (members check it between calls)."""
        return bool(self.conn.exists(self.keys.cancel))

    def stop_reason(self) -> str | None:
        """Why members were told to stop ("cancelled", or a timeout), or None."""
        reason: str | None = self.conn.get(self.keys.cancel)  # a decoded client's text
        return reason

    def request_stop(self, reason: str) -> None:
        """Tell members and the coordinator to stop; the first reason given is kept."""
        self._signal(reason, Wake.STOP)

    def record_approval(self, approved: bool, reason: str | None) -> bool:
        """Store the plan decision once (False if one was already made), then wake the waiter."""
        decision = Approval.APPROVED if approved else Approval.REJECTED
        if not self.conn.hsetnx(self.keys.state, "approval", decision):
            return False
        if reason:
            self.conn.hset(self.keys.state, "approval_reason", reason)
        self.wake(Wake.APPROVAL)
        return True

    def wake(self, what: Wake | str) -> None:
        """Wake a coordinator blocked on the events stream or on the approval list."""
        self._signal("", Wake(what))

    def _signal(self, stop_reason: str, what: Wake) -> None:
        k = self.keys
        self.scripts["run_signal"](
            keys=[k.state, k.cancel, k.events, k.approval], args=[stop_reason, what, WAKE_TASK_ID]
        )

    def wait_for_wake(self, timeout_s: float) -> None:
        """Block until `wake` is called or the timeout passes (the approval wait)."""
        self.blocking_conn.blpop([self.keys.approval], timeout=block_ms(timeout_s * 1000) / 1000)

    @cached_property
    def blocking_conn(self) -> redis.Redis:
        """Connections of their own for BLPOP, with a socket timeout that outlasts it."""
        return blocking_client(self.conn)


def list_runs(conn: redis.Redis, limit: int = 50) -> list[str]:
    """The most recent run ids, newest first."""
    return list(conn.zrevrange(RUNS_INDEX, 0, limit - 1))


def recent_runs(conn: redis.Redis, count: int) -> list[str]:
    """The `count` most recent runs `teamctl runs` lists, newest first: the index read newest
    first in pages, skipping the runs whose keys expired (the index outlives them) without
    removing them, so a verb that only reads writes nothing."""
    found: list[str] = []
    page = max(count, RECENT_PAGE)
    start = 0
    while len(found) < count:
        run_ids = conn.zrevrange(RUNS_INDEX, start, start + page - 1)
        if not run_ids:
            break
        # An id no run could have (added by hand) has no keys to check: `runs` lists it.
        safe = [r for r in run_ids if is_safe_id(r)]
        pipe = conn.pipeline(transaction=False)
        for run_id in safe:
            pipe.exists(RunKeys(run_id).spec)
        stored = {r for r, exists in zip(safe, pipe.execute(), strict=True) if exists}
        found += [r for r in run_ids if r in stored or not is_safe_id(r)]
        start += page
    return found[:count]


def parse_spec(run_id: str, raw: str) -> RunSpec:
    """A stored spec; UnreadableRecord naming the run if it does not parse."""
    try:
        return RunSpec.model_validate_json(raw)
    except ValueError as exc:
        raise unreadable(f"run {run_id} is unreadable: its spec", exc) from exc


def parse_state(run_id: str, fields: dict[str, str]) -> RunState:
    """A run's state hash; UnreadableRecord naming the run if it does not parse."""
    try:
        return RunState.model_validate(fields)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError too
        raise unreadable(f"run {run_id} is unreadable: its state", exc) from exc


def parse_usage(run_id: str, fields: dict[str, str]) -> Usage:
    """A run's usage hash; UnreadableRecord naming the run if it does not parse."""
    try:
        return Usage.model_validate(fields)
    except ValueError as exc:
        raise unreadable(f"run {run_id} is unreadable: its usage", exc) from exc


@dataclass(frozen=True)
class RunSummary:
    """What a list of runs shows of one: its spec, state and usage, or why they do not parse."""

    run_id: str
    spec: RunSpec | None = None
    state: RunState | None = None
    usage: Usage | None = None
    error: str | None = None
    """Set when the run's records do not parse (the others are then None)."""


def run_summaries(conn: redis.Redis, run_ids: list[str]) -> list[RunSummary]:
    """The runs' records, read for all of them in one round trip (`teamctl runs` must stay
    fast with hundreds of runs); a run whose keys expired meanwhile is left out."""
    pipe = conn.pipeline(transaction=False)
    for run_id in run_ids:
        keys = RunKeys(run_id)
        pipe.get(keys.spec)
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.usage)
    replies = pipe.execute()
    summaries = []
    for index, run_id in enumerate(run_ids):
        raw_spec, state, usage = replies[3 * index : 3 * index + 3]
        if raw_spec is None:
            continue
        try:
            summaries.append(
                RunSummary(
                    run_id,
                    parse_spec(run_id, raw_spec),
                    parse_state(run_id, state),
                    parse_usage(run_id, usage),
                )
            )
        except UnreadableRecord as exc:
            summaries.append(RunSummary(run_id, error=str(exc)))
    return summaries
