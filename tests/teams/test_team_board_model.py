"""Team board property test: one Hypothesis state machine adds tasks with dependencies, spawns
teammates, takes and ends their turns, claims and completes tasks and fails turns, on a real
Redis through the store's own calls (as the lead, the CLI and a teammate's turn make them), and
checks after every step that the board keeps the promises the teams runtime makes:

- a task is pending exactly while one of its dependencies is not completed (so a task that
  waits on several never starts after the first), with `deps_left` saying how many;
- an explicit claim or complete succeeds exactly when the board allows it, and a complete
  readies exactly the dependents whose last open dependency it was;
- a task handed out at a turn end or a wake-up goes to a teammate it fits;
- a completed task's output never changes, with one task.result message to the lead each;
- the ready zset, the lanes, the running set and the counts hash agree with the tasks.

The model is deliberately naive: it recomputes each task's readiness from its dependencies'
statuses, as read back after each step, instead of following the scripts' counters.
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from dataclasses import dataclass

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
from teamctl.shared.envelopes import SystemType
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import StaleTurn, TaskRefused, TeamTask, TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

NOBODY = "nobody"
"""The queue the teammates' turns go to: no worker serves it, the machine plays the turns."""
MATES = {"ann": "dev", "bo": "ops", "cy": "Dev"}
"""Teammates the machine may spawn, with their roles (roles match without regard to case)."""
ROLES = ["", "", "dev", "ops", "qa"]
MAX_TASKS = 12
DEAD_TOKEN = "999999"


@dataclass
class PlannedTask:
    """What the lead asked for when it added a task."""

    deps: list[str]
    role: str
    assignee: str


def fits(plan: PlannedTask, name: str) -> bool:
    """Whether teammate `name` may take the task (team_task_fits in _lib/team.lua, for a claim)."""
    if plan.assignee:
        return plan.assignee == name
    return not plan.role or plan.role.lower() == MATES[name].lower()


class TeamBoardMachine(RuleBasedStateMachine):
    """The lead, the CLI and the teammates' turns on one team's board, in random order."""

    def __init__(self, conn: redis.Redis) -> None:
        super().__init__()
        self.conn = conn
        self.planned: dict[str, PlannedTask] = {}
        self.outputs: dict[str, str] = {}
        """Task id -> the output it completed with."""
        self.tokens: dict[str, str] = {}
        """Teammate -> the token of the turn it holds (absent: no turn)."""
        self.board: dict[str, TeamTask] = {}
        """The tasks as read back after the last step."""
        self.claimed_explicitly: set[str] = set()

    @initialize()
    def create_team(self) -> None:
        self.store = TeamStore(self.conn, f"tb-{uuid.uuid4().hex[:10]}")
        self.store.create(TeamOptions(max_message_bytes=2048, max_task_releases=2))
        self.tasks = TeamTasks(self.store)

    # --- helpers --------------------------------------------------------------------------------

    def spawned(self) -> list[str]:
        return [name for name in MATES if self.conn.exists(self.store.keys.teammate(name))]

    def observe(self) -> None:
        """Read the board back; every task that went in progress without an explicit claim was
        handed out, and must have gone to a teammate it fits, never back to its releaser."""
        now = {task.task_id: task for task in self.tasks.snapshot()}
        for tid, task in now.items():
            before = self.board.get(tid)
            started = task.status is TaskStatus.IN_PROGRESS and (
                before is None
                or before.status is not TaskStatus.IN_PROGRESS
                or before.claimed_by != task.claimed_by
            )
            if started and tid not in self.claimed_explicitly:
                holder = task.claimed_by or ""
                assert holder in MATES and fits(self.planned[tid], holder), (tid, holder)
                assert task.released_from != holder, (tid, holder)
        self.claimed_explicitly.clear()
        self.board = now

    def pick_task(self, data: st.DataObject, wanted: TaskStatus) -> str:
        """Mostly a task in the status the rule applies to; sometimes any (to check refusals)."""
        ids = [tid for tid, task in self.board.items() if task.status is wanted]
        if not ids or data.draw(st.integers(0, 3), label="any task") == 0:
            ids = list(self.board)
        return data.draw(st.sampled_from(ids), label="task")

    def open_deps(self, tid: str) -> list[str]:
        return [
            d for d in self.planned[tid].deps if self.board[d].status is not TaskStatus.COMPLETED
        ]

    # --- the lead and the CLI -------------------------------------------------------------------

    @precondition(lambda self: len(self.planned) < MAX_TASKS)
    @rule(data=st.data())
    def add_task(self, data: st.DataObject) -> None:
        existing = list(self.planned)
        deps = data.draw(
            st.lists(st.sampled_from(existing), max_size=3, unique=True)
            if existing
            else st.just([]),
            label="after",
        )
        assignee = data.draw(st.sampled_from(["", "", *self.spawned()]), label="assignee")
        role = data.draw(st.sampled_from(ROLES), label="role")
        task, _ = self.tasks.add(
            f"job {len(existing) + 1}", role=role, assignee=assignee, after=deps
        )
        self.planned[task.task_id] = PlannedTask(deps, role, assignee)
        self.observe()
        expected = TaskStatus.PENDING if self.open_deps(task.task_id) else TaskStatus.READY
        assert (
            self.board[task.task_id].status in (expected, TaskStatus.IN_PROGRESS)
            if expected is TaskStatus.READY
            else self.board[task.task_id].status is expected
        )

    @precondition(lambda self: len(self.spawned()) < len(MATES))
    @rule(data=st.data())
    def spawn(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from([n for n in MATES if n not in self.spawned()]))
        self.store.spawn(
            name, role=MATES[name], prompt="work", model="m", api_base=None, queue=NOBODY
        )
        self.take_turn_of(name)
        self.observe()

    def idle(self) -> list[str]:
        return [n for n in self.spawned() if self.store.get(n).status is TeammateStatus.IDLE]

    @precondition(lambda self: bool(self.idle()))
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        """The lead writes to an idle teammate, which wakes it."""
        name = data.draw(st.sampled_from(self.idle()), label="teammate")
        assert self.store.messages.send("lead", name, "any news?")[1]
        self.observe()

    # --- the teammates' turns -------------------------------------------------------------------

    def take_turn_of(self, name: str) -> None:
        verdict, token = self.store.turns.begin_turn(name, f"machine:{name}")
        assert verdict == "ok", (name, verdict)
        self.tokens[name] = token

    @precondition(
        lambda self: any(
            n not in self.tokens and self.store.get(n).status is TeammateStatus.WORKING
            for n in self.spawned()
        )
    )
    @rule(data=st.data())
    def take_turn(self, data: st.DataObject) -> None:
        """A worker takes the turn a hand-out or a message enqueued."""
        name = data.draw(
            st.sampled_from(
                [
                    n
                    for n in self.spawned()
                    if n not in self.tokens and self.store.get(n).status is TeammateStatus.WORKING
                ]
            )
        )
        self.take_turn_of(name)

    def turn_holder(self, data: st.DataObject) -> tuple[str, str, bool]:
        """A teammate holding a turn, and mostly its turn's token; sometimes a revoked one."""
        name = data.draw(st.sampled_from(sorted(self.tokens)), label="teammate")
        stale = data.draw(st.integers(0, 5), label="stale token") == 0
        return name, DEAD_TOKEN if stale else self.tokens[name], stale

    @precondition(lambda self: bool(self.tokens) and bool(self.board))
    @rule(data=st.data())
    def claim(self, data: st.DataObject) -> None:
        name, token, stale = self.turn_holder(data)
        tid = self.pick_task(data, TaskStatus.READY)
        allowed = (
            not stale
            and self.board[tid].status is TaskStatus.READY
            and fits(self.planned[tid], name)
        )
        try:
            self.tasks.claim(name, token, tid)
        except StaleTurn:
            assert stale
        except TaskRefused:
            assert not allowed and not stale
        else:
            assert allowed
            self.claimed_explicitly.add(tid)
        self.observe()
        if allowed:
            assert (self.board[tid].status, self.board[tid].claimed_by) == (
                TaskStatus.IN_PROGRESS,
                name,
            )

    @precondition(lambda self: bool(self.tokens) and bool(self.board))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        name, token, stale = self.turn_holder(data)
        tid = self.pick_task(data, TaskStatus.IN_PROGRESS)
        task = self.board[tid]
        allowed = not stale and task.status is TaskStatus.IN_PROGRESS and task.claimed_by == name
        waiting = {
            d
            for d, plan in self.planned.items()
            if self.board[d].status is TaskStatus.PENDING
            and tid in plan.deps
            and self.open_deps(d) == [tid]
        }
        output = f"output of {tid} by {name} #{uuid.uuid4().hex[:6]}"
        try:
            ready, _ = self.tasks.complete(name, token, tid, output)
        except StaleTurn:
            assert stale
        except TaskRefused:
            assert not allowed and not stale
        else:
            assert allowed
            assert tid not in self.outputs
            self.outputs[tid] = output
            # Exactly the dependents whose last open dependency this was, in number order.
            assert sorted(ready) == sorted(waiting) and ready == sorted(
                ready, key=lambda t: int(t.rsplit("_", 1)[1])
            )
        self.observe()

    @precondition(lambda self: bool(self.tokens))
    @rule(data=st.data(), failed=st.booleans())
    def end_turn(self, data: st.DataObject, failed: bool) -> None:
        """The turn reads its inbox (the model saw it), then ends, or fails."""
        name = data.draw(st.sampled_from(sorted(self.tokens)), label="teammate")
        token = self.tokens[name]
        last_id, _ = self.store.messages.peek(name)
        assert self.store.turns.checkpoint(name, token, last_id, [])
        if failed:
            verdict = self.store.turns.end_turn(
                name, token, "error: boom", f"{name} failed", force=True, error="boom"
            )
        else:
            verdict = self.store.turns.end_turn(name, token, "done", f"{name} idle")
        assert verdict in ("idle", "continue"), verdict
        if verdict == "idle":
            del self.tokens[name]
        self.observe()

    # --- what must always hold ------------------------------------------------------------------

    @invariant()
    def a_task_is_pending_exactly_while_a_dependency_is_open(self) -> None:
        for tid, task in self.board.items():
            if task.status in (TaskStatus.FAILED, TaskStatus.BLOCKED):
                continue
            open_deps = self.open_deps(tid)
            assert (task.status is TaskStatus.PENDING) == bool(open_deps), (
                tid,
                task.status,
                open_deps,
            )
            if task.status is TaskStatus.PENDING:
                left = int(self.conn.hget(self.store.keys.task(tid), "deps_left") or 0)
                assert left == len(open_deps), (tid, left, open_deps)

    @invariant()
    def completed_outputs_never_change_and_are_announced_once(self) -> None:
        for tid, output in self.outputs.items():
            assert (self.board[tid].status, self.board[tid].output) == (
                TaskStatus.COMPLETED,
                output,
            )
        done = {tid for tid, task in self.board.items() if task.status is TaskStatus.COMPLETED}
        assert done == set(self.outputs)
        if not self.planned:
            return
        results = [m.task_id for m in self.store.messages.notices(SystemType.TASK_RESULT)]
        assert Counter(results) == Counter(list(self.outputs))

    @invariant()
    def indexes_agree_with_the_tasks(self) -> None:
        if not self.planned:
            return
        keys = self.store.keys
        by_status: dict[TaskStatus, set[str]] = {}
        for tid, task in self.board.items():
            by_status.setdefault(task.status, set()).add(tid)
        ready = by_status.get(TaskStatus.READY, set())
        assert set(self.conn.zrange(keys.ready, 0, -1)) == ready
        assert self.conn.smembers(keys.running) == by_status.get(TaskStatus.IN_PROGRESS, set())
        counts = {k: int(v) for k, v in self.conn.hgetall(keys.counts).items() if int(v)}
        assert counts == {status.value: len(ids) for status, ids in by_status.items()}
        lanes = [
            keys.ready_open,
            *(keys.ready_role(r) for r in ROLES if r),
            *(keys.ready_for(n) for n in MATES),
        ]
        in_lanes = Counter(tid for lane in lanes for tid in self.conn.zrange(lane, 0, -1))
        assert in_lanes == Counter(ready)
        for tid in ready:
            lane = self.conn.hget(keys.task(tid), "lane")
            assert self.conn.zscore(lane, tid) is not None, (tid, lane)

    @invariant()
    def a_held_task_is_held_by_a_working_teammate(self) -> None:
        for tid, task in self.board.items():
            if task.status is TaskStatus.IN_PROGRESS:
                holder = task.claimed_by or ""
                assert holder in self.spawned(), (tid, holder)
                assert self.store.get(holder).status is TeammateStatus.WORKING, (tid, holder)

    def teardown(self) -> None:
        """Drop the team's keys, so every example scans a small database."""
        if hasattr(self, "store"):
            self.store.delete(force=True)


def test_the_team_board_agrees_with_the_model(conn: redis.Redis) -> None:
    run_state_machine_as_test(
        functools.partial(TeamBoardMachine, conn),
        settings=settings(
            max_examples=40,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
