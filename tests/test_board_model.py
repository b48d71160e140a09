"""Property test: random plans and operation sequences on the Redis board agree with a small
pure-Python model that refreshes the whole board after every step, as AI4J does."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.board import TaskBoard, WriteOutcome
from shared.models import TaskSpec, TaskStatus
from tests.conftest import wait_until

P, R, IP = TaskStatus.PENDING, TaskStatus.READY, TaskStatus.IN_PROGRESS
C, F, B = TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.BLOCKED
TTL_S = 60.0
TEXTS = ["", "ok", "  spaced out  ", "x" * 250, "a" + "研" * 100]


def short(text: str) -> str:
    text = text.strip()
    return text[:240] + "..." if len(text) > 240 else text


@dataclass
class ModelTask:
    """What the board should hold for one task."""

    task_id: str
    deps: list[str]
    pos: int
    status: TaskStatus = P
    claimed_by: str | None = None
    phase: str = "planned"
    detail: str | None = None
    percent: int = 0
    heartbeat_count: int = 0
    attempts: int = 0
    token: int = 0
    stale_writes: int = 0
    output: str | None = None
    error: str | None = None
    requeue_reason: str | None = None
    alive: bool = False
    """Whether the heartbeat key exists."""

    def view(self) -> tuple[object, ...]:
        return (self.task_id, self.status, self.claimed_by, self.phase, self.detail, self.percent,
                self.heartbeat_count, self.attempts, self.token, self.stale_writes, self.output,
                self.error, self.requeue_reason)

    def end(self, status: TaskStatus, phase: str, detail: str, error: str | None) -> None:
        self.status, self.phase, self.detail, self.error = status, phase, detail, error
        self.percent, self.alive = 100, False


@dataclass
class ModelBoard:
    """The AI4J board semantics, naively: whole-board refresh to a fixed point after each step."""

    tasks: dict[str, ModelTask] = field(default_factory=dict)
    last_token: int = 0

    def create(self, plan: list[tuple[str, list[str]]]) -> None:
        self.tasks = {tid: ModelTask(tid, deps, pos) for pos, (tid, deps) in enumerate(plan)}
        self.refresh()

    def refresh(self) -> None:
        """AI4J refreshStatuses, repeated until nothing changes (blocking is transitive)."""
        while any([self._refresh_one(t) for t in self.tasks.values()]):
            pass

    def _refresh_one(self, t: ModelTask) -> bool:
        if t.status not in (P, R):
            return False
        before = t.view()
        blocker = next((d for d in t.deps if d not in self.tasks
                        or self.tasks[d].status in (F, B)), None)
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

    def check(self, task_id: str, token: int) -> WriteOutcome:
        t = self.tasks.get(task_id)
        if t is None:
            return WriteOutcome.NOT_FOUND
        if token != t.token or token == 0:
            t.stale_writes += 1
            return WriteOutcome.STALE
        return WriteOutcome.APPLIED if t.status == IP else WriteOutcome.CONFLICT

    def claim(self, task_id: str, member: str) -> int | None:
        t = self.tasks[task_id]
        if t.status != R:
            return None
        self.last_token += 1
        who = member or "planned"
        t.status, t.claimed_by, t.phase, t.detail = IP, who, "running", f"Claimed by {who}."
        t.percent, t.heartbeat_count, t.attempts = max(t.percent, 15), 0, t.attempts + 1
        t.token, t.output, t.error, t.alive = self.last_token, None, None, True
        return t.token

    def heartbeat(self, task_id: str, token: int, visible: bool) -> WriteOutcome:
        outcome = self.check(task_id, token)
        t = self.tasks[task_id]
        if outcome is WriteOutcome.APPLIED:
            t.alive = True
            if visible:
                t.heartbeat_count += 1
                t.phase, t.detail = "heartbeat", f"Heartbeat from {t.claimed_by}."
        return outcome

    def complete(self, task_id: str, token: int, output: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            t = self.tasks[task_id]
            t.end(C, "completed", short(output) or "Task completed.", None)
            t.output = output or None
            self.refresh()
        return outcome

    def fail(self, task_id: str, token: int | None, error: str) -> WriteOutcome:
        t = self.tasks[task_id]
        if token is None:
            outcome = WriteOutcome.APPLIED if t.status in (P, R) else WriteOutcome.CONFLICT
        else:
            outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            t.end(F, "failed", short(error) or "Task failed.", error or None)
            self.refresh()
        return outcome

    def release(self, task_id: str, token: int, reason: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        if outcome is WriteOutcome.APPLIED:
            self._requeue(self.tasks[task_id], reason.strip() or "Released back to queue.")
        return outcome

    def _requeue(self, t: ModelTask, reason: str) -> None:
        t.status, t.token, t.claimed_by, t.output, t.alive = P, 0, None, None, False
        t.requeue_reason = reason
        self.refresh()

    def reassign(self, task_id: str, token: int, to: str) -> WriteOutcome:
        outcome = self.check(task_id, token)
        t = self.tasks[task_id]
        if outcome is WriteOutcome.APPLIED:
            t.phase, t.detail = "reassigned", f"Reassigned from {t.claimed_by} to {to}."
            t.claimed_by, t.alive = to, True
        return outcome

    def reclaim(self, max_attempts: int) -> list[str]:
        expired = sorted(t.task_id for t in self.tasks.values() if t.status == IP and not t.alive)
        for task_id in expired:
            t = self.tasks[task_id]
            if t.attempts >= max_attempts:
                reason = f"claim expired after {t.attempts} attempts"
                t.end(F, "failed", reason, reason)
                t.token, t.requeue_reason = 0, "claim expired"
                self.refresh()
            else:
                self._requeue(t, "claim expired")
        return expired

    def block_stalled(self, reason: str) -> int:
        stalled = [t for t in self.tasks.values() if t.status in (P, R)]
        for t in stalled:
            t.end(B, "blocked", reason, reason)
        return len(stalled)

    def next_ready(self, n: int) -> list[str]:
        return [t.task_id for t in self.tasks.values() if t.status == R][:max(n, 1)]


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, list[str]]]:
    """Up to 7 tasks; deps mostly on earlier tasks, sometimes forward (cycles) or missing."""
    size = draw(st.integers(1, 7))
    plan = []
    for i in range(size):
        earlier = st.sampled_from([f"t{j}" for j in range(i)]) if i else st.nothing()
        any_dep = st.one_of(earlier, earlier, st.sampled_from([f"t{j}" for j in range(size)]),
                            st.just("ghost"))
        deps = draw(st.lists(any_dep, max_size=3, unique=True))
        plan.append((f"t{i}", deps))
    return plan


OPS = ["claim"] * 4 + ["complete"] * 3 + ["expire"] * 2 + ["reclaim"] * 3 + [
    "heartbeat", "beat", "fail", "fail_none", "release", "reassign", "stall", "next"]
FENCED = {"heartbeat", "beat", "complete", "fail", "release", "reassign", "expire"}
op_lists = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 6), st.integers(0, 4),
                              st.integers(0, 3)), min_size=10, max_size=30)


class Driver:
    """Applies one drawn operation to the real board and the model, returning both results."""

    def __init__(self, conn: redis.Redis, board: TaskBoard, model: ModelBoard) -> None:
        self.conn, self.board, self.model = conn, board, model
        self.tokens: list[int] = [0]

    def pick(self, op: str, index: int, choice: int) -> str:
        """Mostly a task the operation can apply to (claims: ready; fenced writes: in progress)."""
        wanted = R if op == "claim" else IP if op in FENCED and choice < 3 else None
        ids = [t.task_id for t in self.model.tasks.values() if t.status == wanted]
        ids = ids or list(self.model.tasks)
        return ids[index % len(ids)]

    def token_for(self, task_id: str, choice: int) -> int:
        """Usually the live token, otherwise any token ever issued (mostly stale)."""
        live = self.model.tasks[task_id].token
        return live if choice < 3 else self.tokens[(choice + len(task_id)) % len(self.tokens)]

    def apply(self, op: str, task_id: str, choice: int, extra: int) -> tuple[object, object]:
        board, model, token = self.board, self.model, self.token_for(task_id, choice)
        text = TEXTS[extra]
        if op == "claim":
            member = ["m1", "m2", "", "m1"][extra]
            got = board.claim(task_id, member, "w", TTL_S)
            self.tokens += [got] if got else []
            return got, model.claim(task_id, member)
        if op in ("heartbeat", "beat"):
            visible = op == "beat"
            return (board.heartbeat(task_id, token, TTL_S, visible=visible),
                    model.heartbeat(task_id, token, visible))
        if op == "complete":
            return board.complete(task_id, token, text, 1), model.complete(task_id, token, text)
        if op in ("fail", "fail_none"):
            fenced = token if op == "fail" else None
            return board.fail(task_id, fenced, text), model.fail(task_id, fenced, text)
        if op == "release":
            return board.release(task_id, token, text), model.release(task_id, token, text)
        if op == "reassign":
            to = ["m1", "m2", "m3", "m2"][extra]
            return board.reassign(task_id, token, to), model.reassign(task_id, token, to)
        return self.apply_board_wide(op, task_id, choice, extra)

    def apply_board_wide(self, op: str, task_id: str, choice: int,
                         extra: int) -> tuple[object, object]:
        if op == "expire":
            self.expire(task_id)
            return None, None
        if op == "reclaim":
            max_attempts = 1 + extra % 3  # 1 fails every expired claim; 3 hardly ever
            return self.board.reclaim_expired(max_attempts), self.model.reclaim(max_attempts)
        if op == "stall" and choice == 4:  # rare: it ends most of the plan
            return self.board.block_stalled("stalled"), self.model.block_stalled("stalled")
        return self.board.next_ready(extra), self.model.next_ready(extra)

    def expire(self, task_id: str) -> None:
        """Let the real heartbeat TTL run out (1 ms)."""
        key = self.board.keys.heartbeat(task_id)
        if self.conn.pexpire(key, 1):
            wait_until(lambda: not self.conn.exists(key), 5, interval_s=0.002)
        self.model.tasks[task_id].alive = False


def board_view(board: TaskBoard) -> list[tuple[object, ...]]:
    return [(s.task_id, s.status, s.claimed_by, s.phase, s.detail, s.percent, s.heartbeat_count,
             s.attempts, s.token, s.stale_writes, s.output, s.error, s.requeue_reason)
            for s in board.snapshot()]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=plans(), ops=op_lists)
def test_board_agrees_with_the_model(conn: redis.Redis, plan: list[tuple[str, list[str]]],
                                     ops: list[tuple[str, int, int, int]]) -> None:
    board = TaskBoard(conn, f"p-{uuid.uuid4().hex[:12]}")
    board.create([TaskSpec(id=tid, member_id="planned", task="x", depends_on=deps)
                  for tid, deps in plan])
    model = ModelBoard()
    model.create(plan)
    driver = Driver(conn, board, model)
    assert board_view(board) == [t.view() for t in model.tasks.values()]
    for step, (op, index, choice, extra) in enumerate(ops):
        task_id = driver.pick(op, index, choice)
        got, expected = driver.apply(op, task_id, choice, extra)
        assert got == expected, f"step {step}: {op} {task_id}"
        assert board_view(board) == [t.view() for t in model.tasks.values()], f"after {op}"
        alive = {t.task_id for t in model.tasks.values() if t.alive}
        assert {t for t, _ in plan if conn.exists(board.keys.heartbeat(t))} == alive
        counts = {s: n for s in TaskStatus
                  if (n := sum(t.status == s for t in model.tasks.values()))}
        assert board.counts() == counts
