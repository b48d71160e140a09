"""A persistent team's task board: tasks `task_<n>` on the team's keys, claimed
by teammates and handed to idle ones as they become ready.

The tasks are board task hashes (shared/board.py: same statuses, fencing tokens, dependency
counters and events), so `TaskBoard(conn, TeamKeys(team)).snapshot()` lists them too. What
differs: a task is added one at a time (`team_task_add.lua`), its subject and description are
the board's `task` and `context`, its assignee the board's `member_id`, it may name a `role`,
and a teammate's claim has no heartbeat key: the teammate's turn holds it. A ready task goes to
one idle teammate that fits (`wake_for_tasks.lua`) or waits for the next turn end
(`turn_end.lua`). Both find it through ready lanes (one per assignee, per role and one open;
shared/keys.py), reading only the first tasks of the lanes idle teammates draw from, so a
hand-out costs the same beside ten ready tasks or ten thousand. Turn ends remind a holder
once, then release the task, at most max_task_releases times: the next such end fails it (its
dependents stay pending); a shutdown releases its tasks. Every change is one Lua script;
claims and completions by a turn are token-checked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis
from pydantic import Field
from teamctl.shared.board import TaskBoard, resolve_task_id
from teamctl.shared.bus import LEAD
from teamctl.shared.errors import ConfigError, TeamError
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.hash_fields import HashCsv, HashInt, HashText
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.teammates import Teammate, check_teammate_name
from teamctl.shared.text import shorten

TASK_PREFIX = "task_"
MAX_RETRIES = 100
"""An add racing others for the next number, or a completion racing adds of its dependents,
retries; this bounds a pathological storm."""
HANDOUT_BATCH = 32
"""Most claims one wake_for_tasks call makes: a wake beside many idle teammates runs several
short scripts rather than one that blocks Redis."""
LANE_HEAD = 8
"""Tasks read from the head of a lane beyond one per teammate drawing from it: room for tasks
a teammate may not take back (released from it); a lane that needs more is read deeper."""
FRUITLESS_ROUNDS = 3
"""Wake rounds in a row whose every proposal failed its check before a wake stops: each such
round follows a change that runs its own hand-out (a wake or a turn end)."""
INDEX_CHUNK = 200
"""Tasks one team_lanes_index call puts in their lanes."""


SNAPSHOT_RETRIES = 50
"""Reads of the task keys a script is given before giving up on a board that keeps changing."""


def until_current(run: Callable[[], list[Any]]) -> list[Any]:
    """Run a script that checks the task snapshot its keys were read from, again while it
    answers 'retry' (a claim or completion landed between the read and the script)."""
    for _ in range(SNAPSHOT_RETRIES):
        reply = run()
        if reply[0] != "retry":
            return reply
    raise TeamError("the team's tasks kept changing under this step; try again")


class Enqueues(Protocol):
    """What the board needs of the team's turn scheduler."""

    def enqueue_turn(self, teammate: Teammate) -> None: ...


class Store(Protocol):
    """What the board needs of a team's store (TeamStore in shared/teams/team_store.py, which
    uses the board in its turn ends and shutdowns: hence a protocol, not an import)."""

    conn: redis.Redis
    keys: TeamKeys
    scripts: Scripts | GuardedScripts

    @property
    def team(self) -> str: ...

    @property
    def options(self) -> TeamOptions: ...

    def names(self) -> list[str]: ...

    def get(self, name: str) -> Teammate: ...

    @property
    def scheduler(self) -> Enqueues: ...

    def budget_exceeded(self) -> str | None: ...


class TaskRefused(TeamError):
    """Refused by a task's state (held by another, not ready, not yours): exit 1, tool error."""


class StaleTurn(TeamError):
    """The calling turn no longer holds its lease: the write was refused."""


class TeamTask(TaskState):
    """A team task: a board task hash with the team's fields (see module docstring)."""

    role: HashText = None
    released_from: HashText = None
    """The teammate a reminder release took it from: not handed back to it automatically."""
    releases: HashInt = 0
    """How often it went back to the board unfinished (counted against max_task_releases)."""
    released_by: HashCsv = Field(default_factory=list)
    """Who gave it up, oldest first (the last ten)."""

    @property
    def subject(self) -> str:
        return self.task

    @property
    def description(self) -> str:
        return self.context or ""

    @property
    def assignee(self) -> str | None:
        return self.member_id

    @property
    def owner(self) -> str | None:
        """Who holds it now (None unless in progress)."""
        return self.claimed_by if self.status is TaskStatus.IN_PROGRESS else None

    def view(self) -> dict[str, Any]:
        """What listings show of the task (`team task list --json`, the list_tasks tool)."""
        return {
            "id": self.task_id,
            "status": self.status.value,
            "subject": self.subject,
            "description": self.description,
            "role": self.role,
            "assignee": self.assignee,
            "owner": self.owner,
            "after": self.depends_on,
            "result": self.output,
            "released_reason": self.requeue_reason,
            "releases": self.releases,
            "error": self.error,
        }


def task_id_of(raw: str) -> str:
    """A task id as a teammate or person may write it ("task_3", "Task 3", "3"); ConfigError
    when it cannot name a team task."""
    text = (raw or "").strip()
    resolved = resolve_task_id(TASK_PREFIX + text if text.isdigit() else text)
    if (
        not resolved
        or not resolved.startswith(TASK_PREFIX)
        or not resolved.removeprefix(TASK_PREFIX).isdigit()
    ):
        raise ConfigError(
            f"invalid task id {text!r}: team task ids are task_<n> (see `teamctl team task list`)"
        )
    return resolved


def _number(task_id: str) -> int:
    return int(task_id.removeprefix(TASK_PREFIX))


class TeamTasks:
    """The task board of one team, on its store's connection and scripts."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.keys = store.keys
        self.conn = store.conn
        self.scripts = store.scripts

    # --- the lead's side ------------------------------------------------------------------------

    def add(
        self,
        subject: str,
        *,
        description: str = "",
        role: str = "",
        assignee: str = "",
        after: Sequence[str] = (),
        traceparent: str | None = None,
    ) -> tuple[TeamTask, list[str]]:
        """Add task_<n>; returns it (re-read: it may already be claimed) and the teammates woken
        for ready tasks. ConfigError for an empty subject, text over max_message_bytes, an
        unknown assignee or an unknown --after id (nothing is written)."""
        subject, description, role = subject.strip(), description.strip(), role.strip()
        if not subject:
            raise ConfigError("the task subject is empty; say what is to be done")
        limit = self.store.options.max_message_bytes
        if len((subject + description).encode()) > limit:
            raise ConfigError(
                f"the task's subject and description exceed {limit} bytes "
                "(max_message_bytes); shorten them"
            )
        if assignee:
            self.store.get(check_teammate_name(assignee))
        deps = list(dict.fromkeys(task_id_of(d) for d in after))
        lane = self.lane(role, assignee)
        for _ in range(MAX_RETRIES):
            seq = self.conn.get(self.keys.task_seq) or "0"
            task_id = f"{TASK_PREFIX}{int(seq) + 1}"
            verdict, detail = self.scripts["team_task_add"](
                keys=[
                    self.keys.task_seq,
                    self.keys.order,
                    self.keys.ready,
                    self.keys.counts,
                    self.keys.events,
                    self.keys.task(task_id),
                    lane,
                    *(self.keys.task(d) for d in deps),
                ],
                args=[
                    seq,
                    task_id,
                    subject,
                    description,
                    role,
                    assignee,
                    self.store.options.max_task_releases,
                    *deps,
                ],
            )
            if verdict == "unknown":
                raise ConfigError(f"unknown task {detail} in --after; see `teamctl team task list`")
            if verdict == "ok":
                if traceparent:  # the adder's span, read by the turns it wakes (before them)
                    self.conn.hset(self.keys.task(task_id), "traceparent", traceparent)
                woken = self.wake()
                return self.get(task_id), woken
        raise TeamError(f"task not added: {MAX_RETRIES} concurrent adds won the race; try again")

    def lane(self, role: str, assignee: str) -> str:
        """The ready lane of a task: its assignee's, else its role's, else the open one."""
        if assignee:
            return self.keys.ready_for(assignee)
        return self.keys.ready_role(role) if role else self.keys.ready_open

    def lanes_of(self, name: str, role: str | None) -> list[str]:
        """The lanes teammate `name` of `role` draws tasks from."""
        return [
            self.keys.ready_for(name),
            *([self.keys.ready_role(role)] if role else []),
            self.keys.ready_open,
        ]

    def snapshot(self) -> list[TeamTask]:
        """Every task in number order, as the board stood at one instant, read a page per
        script (the run board's paged snapshot)."""
        board = TaskBoard(self.conn, self.keys, self.scripts)
        return [TeamTask.from_hash(raw) for raw in board.snapshot_hashes()]

    def views(self) -> list[dict[str, Any]]:
        """Every task as listings show it (the list_tasks tools of teammates and the lead)."""
        return [task.view() for task in self.snapshot()]

    def get(self, task_id: str) -> TeamTask:
        """One task; ConfigError for an id that names no task of the team."""
        task_id = task_id_of(task_id)
        raw = self.conn.hgetall(self.keys.task(task_id))
        if not raw:
            raise ConfigError(
                f"unknown task {task_id} in team {self.store.team}; see "
                "`teamctl team task list` (or list_tasks)"
            )
        return TeamTask.from_hash(raw)

    # --- a teammate's turn ----------------------------------------------------------------------

    def claim(self, name: str, token: str, task_id: str) -> TeamTask:
        """The teammate's turn claims a ready task it may take; TaskRefused says why not."""
        task = self.get(task_id)
        verdict, detail = self.scripts["team_task_claim"](
            keys=[
                self.keys.turn(name),
                self.keys.teammate(name),
                self.keys.task(task.task_id),
                self.keys.ready,
                self.keys.running,
                self.keys.counts,
                self.keys.tokens,
                self.keys.events,
            ],
            args=[token, name],
        )
        if verdict != "ok":
            raise self._claim_refusal(task, name, verdict, detail)
        return self.get(task.task_id)

    def _claim_refusal(self, task: TeamTask, name: str, verdict: str, detail: str) -> TeamError:
        tid = task.task_id
        if verdict == "stale":
            return StaleTurn(f"the turn of {name} was revoked; {tid} was not claimed")
        if verdict == "held":
            return TaskRefused(f"{tid} is already held by {'you' if detail == name else detail}")
        if verdict == "not_ready":
            if detail == TaskStatus.PENDING:
                return TaskRefused(
                    f"{tid} is pending: it waits for "
                    f"{', '.join(self._open_deps(task)) or 'its dependencies'}"
                )
            return TaskRefused(f"{tid} is {detail}; only ready tasks can be claimed")
        if verdict == "reserved":
            return TaskRefused(f"{tid} is reserved for {detail}")
        if verdict == "role":
            return TaskRefused(f"{tid} is for role {detail!r}, not yours")
        return ConfigError(f"unknown task {tid}; see list_tasks")

    def _open_deps(self, task: TeamTask) -> list[str]:
        """The dependencies not completed; a failed one says so (the task waits for ever)."""
        pipe = self.conn.pipeline(transaction=False)
        for dep in task.depends_on:
            pipe.hget(self.keys.task(dep), "status")
        status = dict(zip(task.depends_on, pipe.execute(), strict=True))
        return [
            d + (" (failed)" if status[d] == TaskStatus.FAILED else "")
            for d in task.depends_on
            if status[d] != TaskStatus.COMPLETED
        ]

    def complete(
        self, name: str, token: str, task_id: str, result: str
    ) -> tuple[list[str], list[str]]:
        """The teammate's turn completes a task it holds, with its result (also sent to the
        lead as task.result); returns the tasks that became ready and the teammates woken."""
        task = self.get(task_id)
        limit = self.store.options.max_message_bytes
        if len(result.encode()) > limit:
            raise ConfigError(
                f"the result exceeds {limit} bytes (max_message_bytes); shorten "
                "it, or put it in a file and name the file"
            )
        for _ in range(MAX_RETRIES):
            dependents = self.conn.hget(self.keys.task(task.task_id), "dependents") or ""
            reply = self.scripts["team_task_complete"](
                keys=[
                    self.keys.turn(name),
                    self.keys.task(task.task_id),
                    self.keys.ready,
                    self.keys.running,
                    self.keys.counts,
                    self.keys.events,
                    self.keys.bus,
                    self.keys.bus_seq,
                    self.keys.inbox(LEAD),
                    *(self.keys.task(d) for d in dependents.split(",") if d),
                ],
                args=[token, name, result, shorten(result) or "Task completed.", dependents],
            )
            verdict = reply[0]
            if verdict == "ok":
                ready = list(reply[2:])
                return ready, (self.wake() if ready else [])
            if verdict != "retry":
                raise self._complete_refusal(task.task_id, name, reply)
        raise TeamError(f"{task.task_id} not completed: its dependents kept changing; try again")

    @staticmethod
    def _complete_refusal(tid: str, name: str, reply: list[str]) -> TeamError:
        if reply[0] == "stale":
            return StaleTurn(f"the turn of {name} was revoked; {tid} was not completed")
        if reply[0] == "not_yours":
            status, holder = reply[1], reply[2] if len(reply) > 2 else ""
            if status == TaskStatus.IN_PROGRESS:
                return TaskRefused(f"{tid} is held by {holder}, not you")
            if status == TaskStatus.COMPLETED:
                return TaskRefused(f"{tid} is already completed")
            return TaskRefused(f"{tid} is {status}; claim_task it first")
        return ConfigError(f"unknown task {tid}; see list_tasks")

    # --- wake-ups and turn ends -----------------------------------------------------------------

    def wake(self) -> list[str]:
        """Hand ready tasks to idle teammates that fit them (each task in number order to the
        fitting teammate idle longest: claimed for it, working, told by a task.assigned
        message) and enqueue those turns; returns their names. None once the team's budget
        is spent: a turn could make no model call."""
        if self.store.budget_exceeded():
            return []
        woken: list[str] = []
        fruitless = 0
        for _ in range(MAX_RETRIES):
            pairs = [] if fruitless == FRUITLESS_ROUNDS else self._handout_pairs()
            if not pairs:
                break
            triples = [
                key
                for name, task_id in pairs
                for key in (
                    self.keys.teammate(name),
                    self.keys.inbox(name),
                    self.keys.task(task_id),
                )
            ]
            reply = self.scripts["wake_for_tasks"](
                keys=[
                    self.keys.ready,
                    self.keys.running,
                    self.keys.counts,
                    self.keys.tokens,
                    self.keys.events,
                    self.keys.bus,
                    self.keys.bus_seq,
                    *triples,
                ],
                args=[name for name, _ in pairs],
            )
            woken += reply[1::2]
            if not int(reply[0]) and len(pairs) < HANDOUT_BATCH:
                break  # every proposal held and none was left out: nothing more to hand out
            fruitless = 0 if reply[1:] else fruitless + 1
        for name in woken:
            self.store.scheduler.enqueue_turn(self.store.get(name))
        return woken

    def _handout_pairs(self) -> list[tuple[str, str]]:
        """Up to HANDOUT_BATCH (teammate, task) pairs to propose, from the heads of the lanes
        idle teammates draw from; the script checks each again."""
        if not self.conn.zcard(self.keys.ready):
            return []
        self.index_lanes()
        idle = self._idle_teammates()
        if not idle:
            return []
        takers: dict[str, list[str]] = {}
        for name, role in idle:
            for lane in self.lanes_of(name, role):
                takers.setdefault(lane, []).append(name)
        depth = {lane: len(names) + LANE_HEAD for lane, names in takers.items()}
        for _ in range(MAX_RETRIES):
            pairs, short = self._match(takers, depth)
            if not short:
                return pairs
            for lane in short:
                depth[lane] *= 4
        return pairs

    def _idle_teammates(self) -> list[tuple[str, str | None]]:
        """The idle teammates free to take a task (not waiting for a plan's approval), with
        their roles, the one idle longest first."""
        names = self.store.names()
        pipe = self.conn.pipeline(transaction=False)
        for name in names:
            pipe.hmget(self.keys.teammate(name), "status", "role", "plan_state", "last_seen_ms")
        idle = [
            (int(seen or 0), name, role)
            for name, (status, role, plan, seen) in zip(names, pipe.execute(), strict=True)
            if status == "idle" and plan in (None, "", "approved")
        ]
        return [(name, role) for _, name, role in sorted(idle, key=lambda row: row[0])]

    def _match(
        self, takers: dict[str, list[str]], depth: dict[str, int]
    ) -> tuple[list[tuple[str, str]], list[str]]:
        """Pair the lanes' first tasks with their takers, tasks in number order; also the lanes
        read too shallow (a taker left over while tasks it may not take filled what was read
        and the lane holds more)."""
        lanes = list(takers)
        pipe = self.conn.pipeline(transaction=False)
        for lane in lanes:
            pipe.zrange(lane, 0, depth[lane] - 1, withscores=True)
        heads = {lane: rows for lane, rows in zip(lanes, pipe.execute(), strict=True)}
        candidates = sorted(
            (score, task_id, lane) for lane, rows in heads.items() for task_id, score in rows
        )
        pipe = self.conn.pipeline(transaction=False)
        for _, task_id, _ in candidates:
            pipe.hget(self.keys.task(task_id), "released_from")
        taken: set[str] = set()
        pairs: list[tuple[str, str]] = []
        passed_over: set[str] = set()
        for (_, task_id, lane), released_from in zip(candidates, pipe.execute(), strict=True):
            name = next((n for n in takers[lane] if n not in taken and n != released_from), None)
            if name is None:
                if released_from in takers[lane] and released_from not in taken:
                    passed_over.add(lane)
                continue
            taken.add(name)
            pairs.append((name, task_id))
            if len(pairs) == HANDOUT_BATCH:
                return pairs, []
        short = [
            lane
            for lane in passed_over
            if len(heads[lane]) == depth[lane] and any(n not in taken for n in takers[lane])
        ]
        return pairs, short

    def end_candidates(
        self, name: str, role: str | None, depth: int
    ) -> tuple[list[str], list[int], list[str]]:
        """What turn_end.lua takes to find a teammate's next task: its lanes, how many of each
        lane's first tasks were read (`depth`), and those tasks' hashes in number order."""
        lanes = self.lanes_of(name, role)
        pipe = self.conn.pipeline(transaction=False)
        for lane in lanes:
            pipe.zrange(lane, 0, depth - 1, withscores=True)
        rows = sorted({(score, task_id) for heads in pipe.execute() for task_id, score in heads})
        return lanes, [depth] * len(lanes), [self.keys.task(task_id) for _, task_id in rows]

    def index_lanes(self) -> None:
        """Put every task of a team written before ready lanes existed in its lane, once, a
        chunk per script (team_lanes_index.lua)."""
        if self.conn.exists(self.keys.lanes_indexed):
            return
        ids = self.conn.lrange(self.keys.order, 0, -1)
        for start in range(0, len(ids), INDEX_CHUNK):
            chunk = ids[start : start + INDEX_CHUNK]
            pipe = self.conn.pipeline(transaction=False)
            for task_id in chunk:
                pipe.hmget(self.keys.task(task_id), "role", "member_id")
            lanes = [self.lane(role or "", assignee or "") for role, assignee in pipe.execute()]
            self.scripts["team_lanes_index"](keys=[*(self.keys.task(t) for t in chunk), *lanes])
        self.conn.set(self.keys.lanes_indexed, "1")

    def board_keys(self) -> list[str]:
        """The board keys turn_end.lua and team_shutdown.lua take after their own."""
        return [
            self.keys.ready,
            self.keys.running,
            self.keys.counts,
            self.keys.tokens,
            self.keys.events,
        ]

    def running_keys(self) -> list[str]:
        """The hashes of every task in progress (the scripts keep those of one teammate)."""
        return [
            self.keys.task(t) for t in sorted(self.conn.smembers(self.keys.running), key=_number)
        ]
