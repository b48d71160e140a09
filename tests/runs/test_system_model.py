"""System property test: one Hypothesis state machine drives the coordinator's building blocks
(task board, message bus, run store, lease, cancel, retention) on a real Redis, as workers, the
coordinator, a second coordinator and `teamctl cancel` would, and checks after every step that
Redis agrees with a small pure-Python model and keeps the promises the runtime makes:

- at most one live token per task, and no write with any other token applies;
- a completed task never runs again and its output never changes;
- exactly one task.result message per completion;
- the counts hash, the running set and the ready zset agree with the tasks;
- a run ends at most once, only under the lease, and once ended and expired every key expires.

The board model is AI4J's semantics, naively: a whole-board refresh to a fixed point after every
step; the bus model knows who was sent what, who has read what (and which attempt has not yet
acknowledged it) and which messages a trim may drop.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from teamctl.coordinator.cli.commands import cancel_command, resume_command
from teamctl.coordinator.runs.rounds import CANCELLED, CYCLE_REASON
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.bus import TRIM_SLACK_DIVISOR
from teamctl.shared.envelopes import Envelope
from teamctl.shared.errors import ConfigError, RunFailed
from teamctl.shared.ids import BROADCAST
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.retention import expire_run
from teamctl.shared.runs.run_config import ModelChoice
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.settings import load_settings
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.shared.team_file import Member, TeamFile
from teamctl.shared.text import shorten
from teamctl.worker.runs.claims import Claim
from teamctl.worker.runs.mailbox import Mailbox

P, R, IP = TaskStatus.PENDING, TaskStatus.READY, TaskStatus.IN_PROGRESS
C, F, B = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.BLOCKED
MEMBERS = ["m1", "m2", "m3"]
PLANNED_MEMBERS = [*MEMBERS, "m9"]
"""Who plans give tasks to, in turn: m9 is on no team (such tasks can be failed unclaimed)."""
TTL_S = 60.0
"""Claims and leases outlive the test: only the `expire` and `lose_lease` rules end them."""
LEASE_TTL_S = 3600.0
TEXTS = ["", "ok", "  spaced out  ", "x" * 250, "a" + "研" * 100]
READ_CHARS = 10_000_000
"""A member's reads are bounded (tool_result_max_chars); this bound holds all a test sends."""
texts = st.sampled_from(TEXTS)
Msg = tuple[str, str | None, str, str | None, str]
"""A message as (from, to, type, task_id, content), the Envelope fields the model predicts."""


def planned_member(pos: int) -> str:
    return PLANNED_MEMBERS[pos % len(PLANNED_MEMBERS)]


def msg(envelope: Envelope) -> Msg:
    return (envelope.from_, envelope.to, envelope.type, envelope.task_id, envelope.content)


# --- the board model ----------------------------------------------------------------------------


@dataclass
class ModelTask:
    """What the board should hold for one task."""

    task_id: str
    deps: list[str]
    pos: int
    member_id: str
    status: TaskStatus = P
    claimed_by: str | None = None
    phase: str = "planned"
    detail: str | None = None
    percent: int = 0
    heartbeat_count: int = 0
    attempts: int = 0
    token: str = "0"
    stale_writes: int = 0
    output: str | None = None
    error: str | None = None
    requeue_reason: str | None = None
    alive: bool = False
    """Whether the heartbeat key exists."""

    def view(self) -> tuple[object, ...]:
        return (
            self.task_id,
            self.status,
            self.claimed_by,
            self.phase,
            self.detail,
            self.percent,
            self.heartbeat_count,
            self.attempts,
            self.token,
            self.stale_writes,
            self.output,
            self.error,
            self.requeue_reason,
        )

    def end(self, status: TaskStatus, phase: str, detail: str, error: str | None) -> None:
        self.status, self.phase, self.detail, self.error = status, phase, detail, error
        self.percent, self.alive = 100, False


@dataclass
class ModelBoard:
    """The AI4J board semantics; announcements (task.result, task.error) go to `outbox`."""

    tasks: dict[str, ModelTask] = field(default_factory=dict)
    last_token: int = 0
    epoch: str = ""
    """The real server's token epoch (N@EPOCH), learnt from its first token."""
    outbox: list[Msg] = field(default_factory=list)

    def create(self, plan: list[tuple[str, list[str]]]) -> None:
        self.tasks = {
            tid: ModelTask(tid, deps, pos, planned_member(pos))
            for pos, (tid, deps) in enumerate(plan)
        }
        self.refresh()

    def ids(self, status: TaskStatus) -> list[str]:
        return [t.task_id for t in self.tasks.values() if t.status == status]

    def refresh(self) -> None:
        """AI4J refreshStatuses, repeated until nothing changes (blocking is transitive)."""
        while any([self._refresh_one(t) for t in self.tasks.values()]):
            pass

    def _refresh_one(self, t: ModelTask) -> bool:
        if t.status not in (P, R):
            return False
        before = t.view()
        blocker = next(
            (d for d in t.deps if d not in self.tasks or self.tasks[d].status in (F, B)), None
        )
        if blocker is not None:
            reason = "missing dependency" if blocker not in self.tasks else "dependency failed"
            t.end(B, "blocked", f"Blocked: {reason}.", reason)
        elif all(self.tasks[d].status == C for d in t.deps):
            t.status, t.phase, t.error = R, "ready", None
            t.detail = "Dependencies satisfied." if t.deps else "Ready for dispatch."
            t.percent = max(t.percent, 5)
        else:
            t.status, t.phase, t.detail, t.error = P, "pending", "Waiting for dependencies.", None
        return t.view() != before

    def live(self, task_id: str, token: str) -> bool:
        t = self.tasks[task_id]
        return t.status == IP and token == t.token

    def check(self, task_id: str, token: str) -> WriteOutcome:
        t = self.tasks[task_id]
        if token != t.token or token == "0":
            t.stale_writes += 1
            return WriteOutcome.STALE
        return WriteOutcome.APPLIED if t.status == IP else WriteOutcome.CONFLICT

    def claim(self, task_id: str, member: str) -> str | None:
        t = self.tasks[task_id]
        if t.status != R:
            return None
        self.last_token += 1
        who = member or t.member_id
        t.status, t.claimed_by, t.phase, t.detail = IP, who, "running", f"Claimed by {who}."
        t.percent, t.heartbeat_count, t.attempts = max(t.percent, 15), 0, t.attempts + 1
        t.token, t.output, t.error, t.alive = f"{self.last_token}@{self.epoch}", None, None, True
        return t.token

    def heartbeat(self, task_id: str, token: str, visible: bool) -> WriteOutcome:
        outcome = self.check(task_id, token)
        t = self.tasks[task_id]
        if outcome is WriteOutcome.APPLIED:
            t.alive = True
            if visible:
                t.heartbeat_count += 1
                t.phase, t.detail = "heartbeat", f"Heartbeat from {t.claimed_by}."
        return outcome

    def complete(self, task_id: str, token: str, output: str, announce_as: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            t = self.tasks[task_id]
            t.end(C, "completed", shorten(output) or "Task completed.", None)
            t.output = output or None
            self.outbox.append((announce_as, "lead", "task.result", task_id, shorten(output)))
            self.refresh()
        return outcome

    def fail(
        self, task_id: str, token: str | None, error: str, announce_as: str | None = None
    ) -> WriteOutcome:
        t = self.tasks[task_id]
        if token is None:
            outcome = WriteOutcome.APPLIED if t.status in (P, R) else WriteOutcome.CONFLICT
        else:
            outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            t.end(F, "failed", shorten(error) or "Task failed.", error or None)
            if announce_as:
                self.outbox.append((announce_as, "lead", "task.error", task_id, error))
            self.refresh()
        return outcome

    def release(self, task_id: str, token: str, reason: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            self._requeue(self.tasks[task_id], reason.strip() or "Released back to queue.")
        return outcome

    def _requeue(self, t: ModelTask, reason: str) -> None:
        t.status, t.token, t.claimed_by, t.output, t.alive = P, "0", None, None, False
        t.requeue_reason = reason
        self.refresh()

    def reassign(self, task_id: str, token: str, to: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        t = self.tasks[task_id]
        if outcome is WriteOutcome.APPLIED:
            t.phase, t.detail = "reassigned", f"Reassigned from {t.claimed_by} to {to}."
            t.claimed_by, t.alive = to, True
        return outcome

    def reclaim(self, max_attempts: int) -> list[str]:
        """Expired claims go back to ready, or fail (announced) after `max_attempts`."""
        expired = sorted(t.task_id for t in self.tasks.values() if t.status == IP and not t.alive)
        for task_id in expired:
            t = self.tasks[task_id]
            if t.attempts >= max_attempts:
                self._give_up(t, f"claim expired after {t.attempts} attempts", "claim expired")
            else:
                self._requeue(t, "claim expired")
        return expired

    def fail_in_progress(self, reason: str) -> list[str]:
        """A stopped run gives up on every claim, live or not (announced)."""
        running = self.ids(IP)
        for task_id in sorted(running):
            self._give_up(self.tasks[task_id], reason, reason)
        return sorted(running)

    def _give_up(self, t: ModelTask, reason: str, why: str) -> None:
        t.end(F, "failed", reason, reason)
        t.token, t.requeue_reason = "0", why
        self.outbox.append((t.claimed_by or "system", "lead", "task.error", t.task_id, reason))
        self.refresh()

    def block_stalled(self, reason: str) -> int:
        stalled = [t for t in self.tasks.values() if t.status in (P, R)]
        for t in stalled:
            t.end(B, "blocked", reason, reason)
        return len(stalled)

    def next_ready(self, n: int) -> list[str]:
        return self.ids(R)[: max(n, 1)]


# --- the bus model ------------------------------------------------------------------------------


@dataclass
class Unacked:
    """What one task's attempt read as one member and has not acknowledged (bus positions)."""

    token: str
    positions: list[int]


@dataclass
class ModelBus:
    """Every message ever published (by position), each member's deliveries and read count, the
    unacknowledged reads, and the position of the first message still on the bus."""

    cap: int
    sent: list[Msg] = field(default_factory=list)
    delivered: dict[str, list[int]] = field(default_factory=lambda: {m: [] for m in MEMBERS})
    read: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMBERS, 0))
    unacked: dict[tuple[str, str], Unacked] = field(default_factory=dict)
    first_kept: int = 0

    def add(self, message: Msg, *, trims: bool) -> None:
        """Publish; only MessageBus.publish trims (announcements written by Lua do not)."""
        sender, to = message[0], message[1]
        if to in (None, BROADCAST):
            recipients = [m for m in MEMBERS if m != sender]
        else:
            recipients = [to] if to in MEMBERS and to != sender else []
        for member in recipients:
            self.delivered[member].append(len(self.sent))
        self.sent.append(message)
        if trims and len(self.sent) - self.first_kept > self.cap + self.cap // TRIM_SLACK_DIVISOR:
            self.trim()

    def unread(self, member: str) -> list[int]:
        return self.delivered[member][self.read[member] :]

    def read_unread(self, member: str, task_id: str | None, token: str) -> list[int]:
        """New messages, after what an earlier attempt of the task read and never acknowledged
        (no task: a plain read, nothing to acknowledge)."""
        got: list[int] = []
        record = self.unacked.get((member, task_id)) if task_id else None
        if record is not None and record.token != token:
            got, record.token = list(record.positions), token
        new = self.unread(member)
        self.read[member] = len(self.delivered[member])
        if new and task_id:
            self.unacked.setdefault((member, task_id), Unacked(token, [])).positions += new
        return got + new

    def acknowledge(self, task_id: str, members: list[str], live: bool) -> bool:
        if live:
            for member in members:
                self.unacked.pop((member, task_id), None)
        return live

    def trim(self) -> int:
        floors = [u[0] for u in map(self.unread, MEMBERS) if u]
        floors += [record.positions[0] for record in self.unacked.values()]
        floor = min(floors, default=len(self.sent))
        before = self.first_kept
        self.first_kept = max(before, min(len(self.sent) - self.cap, floor))
        return self.first_kept - before

    def history(self, member: str, limit: int) -> list[int]:
        kept = [i for i in self.delivered[member] if i >= self.first_kept]
        return kept[-limit:] if limit else kept

    def kept(self) -> list[Msg]:
        return self.sent[self.first_kept :]


@dataclass
class ModelRun:
    """The run's status, who holds its lease, who ever did, and whether it stopped or ended."""

    status: RunStatus = RunStatus.RUNNING
    holder: str | None = None
    owners: list[str] = field(default_factory=list)
    stop: str | None = None
    ends: int = 0
    ended_ms: int = 0
    expired: bool = False

    @property
    def ended(self) -> bool:
        return self.status.finished


@dataclass(frozen=True)
class Attempt:
    """A claim some worker was given: its token may have been revoked since."""

    task_id: str
    token: str
    member_id: str


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    """Up to 7 tasks; deps mostly on earlier tasks, sometimes forward (cycles) or missing."""
    size = draw(st.integers(1, 7))
    plan = []
    for i in range(size):
        deps = (
            draw(st.lists(st.sampled_from([f"t{j}" for j in range(i)]), max_size=2, unique=True))
            if i
            else []
        )
        twist = draw(st.sampled_from(["none"] * 6 + ["forward", "ghost"]))
        if twist == "forward":
            deps.append(draw(st.sampled_from([f"t{j}" for j in range(i, size)])))
        elif twist == "ghost":
            deps.append("ghost")
        plan.append((f"t{i}", deps))
    return plan


def board_view(board: TaskBoard) -> list[tuple[object, ...]]:
    return [
        (
            s.task_id,
            s.status,
            s.claimed_by,
            s.phase,
            s.detail,
            s.percent,
            s.heartbeat_count,
            s.attempts,
            s.token,
            s.stale_writes,
            s.output,
            s.error,
            s.requeue_reason,
        )
        for s in board.snapshot()
    ]


# --- the machine --------------------------------------------------------------------------------


class SystemMachine(RuleBasedStateMachine):
    """Workers, coordinators, `teamctl cancel` and bus readers on one run, in random order."""

    def __init__(self, conn: redis.Redis, redis_url: str, workspace_root: Path) -> None:
        super().__init__()
        self.conn, self.redis_url, self.workspace_root = conn, redis_url, workspace_root
        self.leases: dict[str, Lease] = {}
        self.attempts: list[Attempt] = []
        self.completed: dict[str, str | None] = {}
        """Task id -> the output it completed with."""
        self.issued: dict[str, str] = {}
        """Task id -> the last token a claim of it got."""
        self.claims_at_takeover = 0
        self.stale_tried: set[tuple[str, bool]] = set()
        """(coordinator, whether the run had ended) pairs whose stale writes were tried."""
        self.refused_after_end = False

    @initialize(plan=plans(), cap=st.integers(1, 6), max_attempts=st.integers(1, 3))
    def start_run(self, plan: list[tuple[str, list[str]]], cap: int, max_attempts: int) -> None:
        """A coordinator creates the run, takes its lease, puts the plan on the board."""
        team = TeamFile(
            members=[Member(id=m) for m in MEMBERS],
            options=RunOptions(bus_max_messages=cap, max_attempts=max_attempts),
        )
        models = ModelChoice(planner="p", synthesizer="s", member_default="m")
        self.spec = create_run(
            self.conn,
            RunRequest(
                objective="o",
                team=team,
                models=models,
                workspace_root=self.workspace_root,
                run_id=f"s-{uuid.uuid4().hex[:10]}",
            ),
        )
        self.run_id = self.spec.run_id
        self.board = TaskBoard(self.conn, RunKeys(self.run_id))
        self.board.create(
            [
                TaskSpec(id=tid, member_id=planned_member(pos), task="x", depends_on=deps)
                for pos, (tid, deps) in enumerate(plan)
            ]
        )
        self.bus = RunHandle(self.conn, self.run_id, spec=self.spec).bus
        self.model, self.bus_model, self.run = ModelBoard(), ModelBus(cap), ModelRun()
        self.model.create(plan)
        self.take_lease()

    # --- helpers --------------------------------------------------------------------------------

    def take_lease(self) -> None:
        """A coordinator (the first, or one resuming) takes the free lease and runs the run."""
        lease = Lease(self.conn, RunKeys(self.run_id), LEASE_TTL_S)
        lease.check_free()
        assert lease.try_acquire()
        self.leases[lease.owner] = lease
        self.run.holder = lease.owner
        self.run.owners.append(lease.owner)
        self.claims_at_takeover = len(self.attempts)
        self.store(lease.owner).set_status(RunStatus.RUNNING)

    def store(self, owner: str | None) -> RunStore:
        return RunStore(self.conn, RunKeys(self.run_id), owner)

    def pick(self, data: st.DataObject, wanted: TaskStatus) -> str:
        """Mostly a task in the status the rule applies to; sometimes any (to check refusals)."""
        ids = self.model.ids(wanted)
        if not ids or data.draw(st.integers(0, 3), label="any task") == 0:
            ids = list(self.model.tasks)
        return data.draw(st.sampled_from(ids), label="task")

    def live_claims(self) -> list[Attempt]:
        return [a for a in self.attempts if self.model.live(a.task_id, a.token)]

    def fenced(self, data: st.DataObject) -> tuple[str, str]:
        """Mostly a live claim; else any task with any token ever issued (stale or not)."""
        live = self.live_claims()
        if live and data.draw(st.integers(0, 3), label="live claim") > 0:
            attempt = data.draw(st.sampled_from(live), label="claim")
            return attempt.task_id, attempt.token
        task_id = data.draw(st.sampled_from(list(self.model.tasks)), label="task")
        tokens = ["0", self.model.tasks[task_id].token, *(a.token for a in self.attempts)]
        return task_id, data.draw(st.sampled_from(tokens), label="token")

    def member_of(self, task_id: str) -> str:
        t = self.model.tasks[task_id]
        return t.claimed_by or t.member_id

    def flush_outbox(self) -> None:
        """What the board's scripts announced on the bus (they never trim)."""
        for message in self.model.outbox:
            self.bus_model.add(message, trims=False)
        self.model.outbox.clear()

    def worker_writes(
        self, kind: str, task_id: str, token: str, text: str, member: str
    ) -> WriteOutcome:
        """As a worker ends an attempt: settle its reads (fenced), then one fenced outcome write
        that announces it to lead."""
        live = self.model.live(task_id, token)
        assert self.bus.acknowledge_reads(task_id, token, MEMBERS) is live
        self.bus_model.acknowledge(task_id, MEMBERS, live)
        write = self.board.complete if kind == "complete" else self.board.fail
        got = write(task_id, token, text, 1, announce_as=member)
        model_write = self.model.complete if kind == "complete" else self.model.fail
        assert got == model_write(task_id, token, text, member)
        if got is WriteOutcome.APPLIED and kind == "complete":
            self.completed[task_id] = text or None
        self.flush_outbox()
        return got

    def end_run(self, status: RunStatus, announce: str, text: str) -> None:
        """The model of RunStore.finish then expire_run: the one end of the run."""
        self.run.status, self.run.ends, self.run.expired = status, self.run.ends + 1, True
        self.run.ended_ms = self.store(None).state().ended_ms
        self.bus_model.add(("system", "lead", announce, None, text), trims=False)

    # --- workers --------------------------------------------------------------------------------

    @rule(data=st.data(), member=st.sampled_from(["", *MEMBERS]))
    def claim(self, data: st.DataObject, member: str) -> None:
        task_id = self.pick(data, R)
        got = self.board.claim(task_id, member, "w:1", TTL_S)
        if got is not None and not self.model.epoch:
            self.model.epoch = got.split("@")[1]
        assert got == self.model.claim(task_id, member)
        if task_id in self.completed:
            assert got is None, f"completed task {task_id} ran again"
        if got is not None:
            self.issued[task_id] = got
            self.attempts.append(Attempt(task_id, got, self.member_of(task_id)))

    @precondition(lambda self: self.live_claims())
    @rule(data=st.data(), visible=st.booleans())
    def heartbeat(self, data: st.DataObject, visible: bool) -> None:
        task_id, token = self.fenced(data)
        got = self.board.heartbeat(task_id, token, TTL_S, visible=visible)
        assert got == self.model.heartbeat(task_id, token, visible)

    @precondition(lambda self: self.live_claims())
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """A worker dies: its heartbeat key goes, as its TTL running out would."""
        task_id = data.draw(st.sampled_from(self.live_claims()), label="claim").task_id
        self.conn.delete(self.board.keys.heartbeat(task_id))
        self.model.tasks[task_id].alive = False

    @precondition(lambda self: self.live_claims())
    @rule(
        data=st.data(),
        kind=st.sampled_from(["complete", "complete", "complete", "fail"]),
        text=texts,
    )
    def finish(self, data: st.DataObject, kind: str, text: str) -> None:
        """A worker completes its task (or fails it, less often)."""
        task_id, token = self.fenced(data)
        self.worker_writes(kind, task_id, token, text, self.member_of(task_id))

    @precondition(
        lambda self: any(a.token != self.model.tasks[a.task_id].token for a in self.attempts)
    )
    @rule(data=st.data(), kind=st.sampled_from(["complete", "fail"]), text=texts)
    def stale_write(self, data: st.DataObject, kind: str, text: str) -> None:
        """A worker whose claim was revoked (reclaimed, released, cancelled) writes late."""
        stale = [a for a in self.attempts if a.token != self.model.tasks[a.task_id].token]
        attempt = data.draw(st.sampled_from(stale), label="stale attempt")
        before = self.board.get(attempt.task_id)
        got = self.worker_writes(kind, attempt.task_id, attempt.token, text, attempt.member_id)
        assert got is WriteOutcome.STALE
        after = self.board.get(attempt.task_id)
        assert after.stale_writes == before.stale_writes + 1
        assert (after.status, after.output, after.token) == (
            before.status,
            before.output,
            before.token,
        )

    @precondition(lambda self: self.live_claims())
    @rule(data=st.data(), text=texts)
    def release(self, data: st.DataObject, text: str) -> None:
        task_id, token = self.fenced(data)
        assert self.board.release(task_id, token, text) == self.model.release(task_id, token, text)

    @precondition(lambda self: self.live_claims())
    @rule(data=st.data(), to=st.sampled_from(MEMBERS))
    def reassign(self, data: st.DataObject, to: str) -> None:
        task_id, token = self.fenced(data)
        assert self.board.reassign(task_id, token, to) == self.model.reassign(task_id, token, to)

    # --- the coordinator ------------------------------------------------------------------------

    @precondition(
        lambda self: any(t.status == IP and not t.alive for t in self.model.tasks.values())
    )
    @rule()
    def reclaim(self) -> None:
        max_attempts = self.spec.options.max_attempts
        got = self.board.reclaim_expired(max_attempts, announce_failures=True)
        assert got == self.model.reclaim(max_attempts)
        self.flush_outbox()

    @precondition(lambda self: self.unknown_member_tasks())
    @rule(data=st.data(), text=texts)
    def fail_unclaimed(self, data: st.DataObject, text: str) -> None:
        """With fail_on_unknown_member the coordinator fails, instead of dispatching, a task
        whose member is not on the team (tokenless: only while nobody holds it)."""
        task_id = data.draw(st.sampled_from(self.unknown_member_tasks()), label="task")
        assert self.board.fail(task_id, None, text) == self.model.fail(task_id, None, text)

    def unknown_member_tasks(self) -> list[str]:
        return [t.task_id for t in self.model.tasks.values() if t.member_id not in MEMBERS]

    @precondition(
        lambda self: not self.model.ids(R) and not self.model.ids(IP) and self.model.ids(P)
    )
    @rule()
    def block_cycle(self) -> None:
        """Nothing ready or in flight yet work is pending: the plan is stuck (a cycle)."""
        got = self.board.block_stalled(CYCLE_REASON)
        assert got == self.model.block_stalled(CYCLE_REASON)

    def driving(self) -> bool:
        return self.run.holder is not None and not self.run.ended

    @precondition(lambda self: self.may_stop() and self.driving() and self.run.stop is None)
    @rule()
    def time_out(self) -> None:
        reason = "run timed out after 1s"
        self.store(self.run.holder).request_stop(reason)
        self.run.stop = reason

    @precondition(lambda self: self.driving() and self.run.stop is not None)
    @rule()
    def drain(self) -> None:
        """A stopping coordinator: reclaim, and block what never ran; claims still run."""
        self.reclaim()
        assert self.board.block_stalled(self.run.stop) == self.model.block_stalled(self.run.stop)

    @precondition(
        lambda self: (
            self.driving()
            and (
                self.run.stop is not None
                or not (set(self.model.ids(P)) | set(self.model.ids(R)) | set(self.model.ids(IP)))
            )
        )
    )
    @rule()
    def end_run_as_coordinator(self) -> None:
        """Stopped (past its grace period) or out of work: the coordinator ends the run under
        its lease, expires its keys and lets the lease go."""
        owner = self.run.holder
        store = self.store(owner)
        if self.run.stop is not None:
            self.drain()
            reason = self.run.stop
            got = self.board.fail_in_progress(reason, announce_failures=True)
            assert got == self.model.fail_in_progress(reason)
            self.flush_outbox()
            status = RunStatus.CANCELLED if reason == CANCELLED else RunStatus.FAILED
            store.finish(
                RunEnd(
                    status,
                    self.spec.options.retention_s,
                    error=reason,
                    announce=f"run.{status}",
                    announce_text=reason,
                )
            )
            self.end_run(status, f"run.{status}", reason)
        else:
            store.set_status(RunStatus.SYNTHESIZING)
            all_done = all(t.status == C for t in self.model.tasks.values())
            status = RunStatus.COMPLETED if all_done else RunStatus.FAILED
            store.finish(
                RunEnd(
                    status,
                    self.spec.options.retention_s,
                    output="the synthesis",
                    announce="run.complete",
                    announce_text="the synthesis",
                )
            )
            self.end_run(status, "run.complete", "the synthesis")
        expire_run(self.conn, self.run_id, self.spec.options.retention_s)
        self.leases[owner].release()
        self.run.holder = None

    @precondition(lambda self: self.driving() and len(self.attempts) > self.claims_at_takeover)
    @rule()
    def lose_lease(self) -> None:
        """The coordinator is cut off past its lease TTL: the key goes, as the TTL would."""
        with pytest.raises(ConfigError, match="is driven by"):  # resume refused until then
            Lease(self.conn, RunKeys(self.run_id), LEASE_TTL_S).check_free()
        self.conn.delete(self.board.keys.lease)
        self.run.holder = None

    @precondition(lambda self: not self.run.ended and self.run.holder is None)
    @rule()
    def resume(self) -> None:
        """`teamctl resume` once the lease is free: another coordinator takes the run over."""
        self.take_lease()

    @precondition(lambda self: any(o != self.run.holder for o in self.run.owners))
    @rule(data=st.data())
    def renew_lease(self, data: st.DataObject) -> None:
        """A coordinator that was cut off renews: it takes a free lease back (even after another
        ended the run), and learns it lost the run if another holds it."""
        owner = data.draw(st.sampled_from([o for o in self.run.owners if o != self.run.holder]))
        free = self.run.holder is None
        assert self.leases[owner]._renew() is free
        if free:
            self.run.holder = owner
            self.claims_at_takeover = len(self.attempts)

    def stale_coordinators(self) -> list[str]:
        """Coordinators whose fenced writes must be refused (they lost the lease, or hold it
        after the run ended), not yet tried since the run ended (or not)."""
        return [
            o
            for o in self.run.owners
            if (o != self.run.holder or self.run.ended)
            and (o, self.run.ended) not in self.stale_tried
        ]

    @precondition(lambda self: self.stale_coordinators())
    @rule(data=st.data(), status=st.sampled_from([RunStatus.RUNNING, RunStatus.SYNTHESIZING]))
    def stale_coordinator_writes(self, data: st.DataObject, status: RunStatus) -> None:
        """A coordinator that lost its lease comes back: its fenced writes are all refused."""
        owner = data.draw(st.sampled_from(self.stale_coordinators()), label="owner")
        self.stale_tried.add((owner, self.run.ended))
        store = self.store(owner)
        with pytest.raises(RunFailed):
            store.set_status(status)
        with pytest.raises(RunFailed):
            store.finish(
                RunEnd(
                    RunStatus.COMPLETED,
                    self.spec.options.retention_s,
                    output="stale synthesis",
                    announce="run.complete",
                    announce_text="stale synthesis",
                )
            )

    def may_stop(self) -> bool:
        """Not ended, and a couple of claims made: most runs get somewhere before they stop."""
        return not self.run.ended and len(self.attempts) >= 2

    @precondition(
        lambda self: self.may_stop() and (self.run.stop != CANCELLED or self.run.holder is None)
    )
    @rule()
    def cancel(self) -> None:
        """`teamctl cancel`: stop requested; with no live coordinator it ends the run itself."""
        cancel_command(self.redis_url, self.run_id)
        self.run.stop = self.run.stop or CANCELLED
        # What never ran is blocked at once, before a member in flight fails its task.
        self.model.block_stalled(CANCELLED)
        if self.run.holder is not None:
            return  # its coordinator stops the run (drain, end_run_as_coordinator)
        self.model.reclaim(self.spec.options.max_attempts)
        self.model.block_stalled(CANCELLED)
        self.model.fail_in_progress(CANCELLED)
        self.flush_outbox()
        self.end_run(RunStatus.CANCELLED, "run.cancelled", CANCELLED)

    @precondition(lambda self: self.run.ended and not self.refused_after_end)
    @rule()
    def commands_on_an_ended_run(self) -> None:
        """cancel and resume refuse a run that has ended."""
        self.refused_after_end = True
        with pytest.raises(ConfigError, match="already finished"):
            cancel_command(self.redis_url, self.run_id)
        with pytest.raises(ConfigError, match="already finished"):
            resume_command(
                redis_url=self.redis_url,
                run_id=self.run_id,
                workers=0,
                as_json=False,
                approve_plan=True,
                settings=load_settings(),
            )

    # --- the bus --------------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["send", "broadcast", "publish"]),
        sender=st.sampled_from(MEMBERS),
        to=st.sampled_from([None, "lead", *MEMBERS]),
    )
    def publish(self, kind: str, sender: str, to: str | None) -> None:
        """A member messages a teammate or everyone; the runtime publishes to anyone."""
        content = f"n{len(self.bus_model.sent)}"
        if kind == "publish":
            self.bus.publish("system", to, "note", None, content)
            self.bus_model.add(("system", to, "note", None, content), trims=True)
        elif kind == "broadcast":
            self.bus.broadcast(sender, None, None, content)
            self.bus_model.add((sender, BROADCAST, "peer.broadcast", None, content), trims=True)
        elif to not in MEMBERS or to == sender:
            with pytest.raises(ConfigError, match="invalid recipient|cannot"):
                self.bus.send(sender, to, None, None, content)
        else:
            self.bus.send(sender, to, None, None, content)
            self.bus_model.add((sender, to, "peer.message", None, content), trims=True)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS))
    def read_messages(self, data: st.DataObject, member: str) -> None:
        """team_read_messages: an attempt (mostly a live one, else a revoked one) reads as a
        member; sometimes a plain read, as no attempt."""
        live = self.live_claims()
        attempts = live if live and data.draw(st.booleans()) else self.attempts
        attempt = data.draw(st.sampled_from([None, *attempts]), label="attempt")
        if attempt is None:
            got = [msg(m) for m in self.bus.read_unread(member)]
            expected = self.bus_model.read_unread(member, None, "0")
        else:
            mailbox = Mailbox(self.bus, member, Claim(attempt.task_id, attempt.token, member))
            page = mailbox.read(READ_CHARS)
            assert page.remaining == 0, "the model's messages are short: one read takes all"
            got = [msg(m) for m in page.messages]
            expected = self.bus_model.read_unread(member, attempt.task_id, attempt.token)
        assert got == [self.bus_model.sent[i] for i in expected]

    @precondition(lambda self: self.attempts)
    @rule(data=st.data(), member=st.sampled_from(MEMBERS))
    def acknowledge(self, data: st.DataObject, member: str) -> None:
        """The attempt's next model call carries what it read (refused once it was revoked)."""
        attempt = data.draw(st.sampled_from(self.attempts), label="attempt")
        live = self.model.live(attempt.task_id, attempt.token)
        got = self.bus.acknowledge_reads(attempt.task_id, attempt.token, [member])
        assert got is self.bus_model.acknowledge(attempt.task_id, [member], live)

    @precondition(lambda self: len(self.bus_model.kept()) > self.bus_model.cap)
    @rule()
    def trim(self) -> None:
        assert self.bus.trim() == self.bus_model.trim()

    # --- invariants -----------------------------------------------------------------------------

    def started(self) -> bool:
        return hasattr(self, "board")

    @invariant()
    def board_agrees_with_the_model(self) -> None:
        if not self.started():
            return
        assert board_view(self.board) == [t.view() for t in self.model.tasks.values()]
        alive = {t.task_id for t in self.model.tasks.values() if t.alive}
        assert {
            t for t in self.model.tasks if self.conn.exists(self.board.keys.heartbeat(t))
        } == alive

    @invariant()
    def reads_agree_with_the_model(self) -> None:
        """What the coordinator dispatches next, and each member's recent history."""
        if not self.started():
            return
        for n in (1, 3):
            assert self.board.next_ready(n) == self.model.next_ready(n)
        for member, limit in zip(MEMBERS, (0, 1, 3), strict=True):
            got = [msg(m) for m in self.bus.history_for(member, limit)]
            assert got == [self.bus_model.sent[i] for i in self.bus_model.history(member, limit)]

    @invariant()
    def at_most_one_live_token_per_task(self) -> None:
        """Only an in-progress task has a live token: its last claim's, also in its heartbeat
        key. An ended task may keep its last holder's token (that holder's second write is a
        conflict, not a stale write), never another."""
        if not self.started():
            return
        live: list[str] = []
        for state in self.board.snapshot():
            last = self.issued.get(state.task_id, "0")
            if state.status is IP:
                assert state.token == last != "0"
                beat = self.conn.get(self.board.keys.heartbeat(state.task_id))
                assert beat in (None, last)
                live.append(state.token)
            elif state.status in (C, F):
                assert state.token in ("0", last)
            else:
                assert state.token == "0"
        assert len(live) == len(set(live))

    @invariant()
    def completed_tasks_never_run_again(self) -> None:
        if not self.started():
            return
        for state in self.board.get_many(list(self.completed)):
            assert (state.status, state.output) == (C, self.completed[state.task_id])

    @invariant()
    def one_result_message_per_completion(self) -> None:
        """Redis holds exactly the messages the model published (and counted every one ever
        published): so one task.result per completed task, and none for any other."""
        if not self.started():
            return
        assert [msg(m) for m in self.bus.messages()] == self.bus_model.kept()
        assert int(self.conn.get(self.board.keys.bus_seq) or 0) == len(self.bus_model.sent)
        results = Counter(m[3] for m in self.bus_model.sent if m[2] == "task.result")
        assert results == Counter(list(self.completed))
        for member in MEMBERS:  # nothing unread or unacknowledged has left the bus
            assert all(i >= self.bus_model.first_kept for i in self.bus_model.unread(member))
        assert all(
            i >= self.bus_model.first_kept
            for record in self.bus_model.unacked.values()
            for i in record.positions
        )

    @invariant()
    def counts_and_sets_agree_with_the_tasks(self) -> None:
        if not self.started():
            return
        states = self.board.snapshot()
        raw = {s: int(n) for s, n in self.conn.hgetall(self.board.keys.counts).items()}
        assert all(n >= 0 for n in raw.values())
        assert {s: n for s, n in raw.items() if n} == Counter(s.status.value for s in states)
        in_progress = {s.task_id for s in states if s.status is IP}
        assert self.conn.smembers(self.board.keys.running) == in_progress
        # Scored by plan position: the zset's order is the plan's.
        ready = [s.task_id for s in states if s.status is R]
        assert self.conn.zrange(self.board.keys.ready, 0, -1) == ready

    @invariant()
    def a_run_ends_once_under_its_lease(self) -> None:
        if not self.started():
            return
        state = self.store(None).state()
        assert state.status == self.run.status
        assert self.run.ends == (1 if self.run.ended else 0)
        if self.run.ended:
            assert state.ended_ms == self.run.ended_ms
        ends = [m for m in self.bus_model.sent if m[0] == "system" and m[2].startswith("run.")]
        assert len(ends) == self.run.ends
        assert self.store(None).stop_reason() == self.run.stop
        assert self.conn.get(self.board.keys.lease) == self.run.holder

    @invariant()
    def an_ended_run_expires(self) -> None:
        if not self.started() or not self.run.expired:
            return
        names = list(self.conn.scan_iter(match=self.board.keys.all_patterns(), count=500))
        pipe = self.conn.pipeline(transaction=False)
        for name in names:
            pipe.pttl(name)
        assert [n for n, ttl_ms in zip(names, pipe.execute(), strict=True) if ttl_ms == -1] == []

    def teardown(self) -> None:
        """Drop the run's keys, so every example scans a small database."""
        if self.started():
            names = list(self.conn.scan_iter(match=self.board.keys.all_patterns(), count=500))
            if names:
                self.conn.delete(*names)


def test_the_system_agrees_with_the_model(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    run_state_machine_as_test(
        functools.partial(SystemMachine, conn, redis_url, tmp_path),
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
