"""A run as its page shows it: spec, state, usage, tasks, each task's attempts (rebuilt from the
run's `events` stream), transcripts and bus, read from Redis in one pass without writing."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from teamctl.shared.agent.replies import Usage
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import Envelope
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunState, parse_usage
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import EventKind, TaskEvent, TaskState, TaskStatus

MESSAGES_SHOWN = 200
"""Bus messages a live page shows, the latest: it is read again after every change, while a run
may keep 100,000 (the report, `teamctl messages` and `teamctl export` show them all)."""
TASKS_DETAILED = 200
"""Tasks whose details (input, output, attempts) a live page shows: it is read again, and the
browser builds it again, after every change, and ten thousand tasks' details take a browser
many seconds (the graph and the counts still show every task; the report has every detail)."""
EVENTS_PAGE = 1000
"""Entries per XRANGE while the events stream is read (it keeps about 10000)."""
ATTEMPT_ENDS = {
    EventKind.COMPLETED: "completed",
    EventKind.FAILED: "failed",
    EventKind.RELEASED: "released",
    EventKind.RECLAIMED: "reclaimed",
}
"""The task changes that end the attempt in progress, and the outcome each gives it."""


@dataclass
class AttemptRow:
    """One attempt as a row of the run's page: a claim of a task, from the `in_progress` entry
    that opened it to the change that ended it (`end_ms` None while it runs, or when the
    stream no longer says)."""

    task_id: str
    number: int
    member_id: str | None
    worker: str
    token: str
    start_ms: int
    end_ms: int | None = None
    outcome: str = "running"
    stale_writes: int = 0
    """Late writes refused on the task, counted on each attempt whose claim was taken back
    (released or reclaimed): the board counts them per task, and only such a claim's holder
    can still write with its dead token."""


@dataclass
class RunView:
    """Everything a run's page and its report show."""

    run_id: str
    spec: RunSpec
    state: RunState
    usage: Usage
    tasks: list[TaskState]
    attempts: list[AttemptRow]
    messages: list[Envelope]
    transcripts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    last_event_id: str = "0-0"
    """The last entry of the events stream read: a live page follows on from here."""
    last_message_id: str = "0-0"
    detailed: list[TaskState] = field(default_factory=list)
    """The tasks whose details the page shows, in plan order: every task, or on a live page
    the TASKS_DETAILED that matter most now (see `most_relevant`)."""
    forks: list[str] = field(default_factory=list)
    """The runs replayed or forked from this one (its own source is in `spec.lineage`)."""

    @functools.cached_property
    def now_ms(self) -> int:
        """When the page was built: what a waiting call's time left counts from."""
        return now_ms()

    def attempts_of(self, task_id: str) -> list[AttemptRow]:
        return self.attempts_by_task.get(task_id, [])

    @functools.cached_property
    def attempts_by_task(self) -> dict[str, list[AttemptRow]]:
        """The attempts grouped by task once: the page asks for each of thousands of tasks."""
        grouped: dict[str, list[AttemptRow]] = {}
        for attempt in self.attempts:
            grouped.setdefault(attempt.task_id, []).append(attempt)
        return grouped

    def task_status(self, task: TaskState) -> str:
        """A task's status as the page shows it (`planned` while the plan awaits approval)."""
        return task.status.shown(self.state.status is RunStatus.AWAITING_APPROVAL)

    def counts(self) -> dict[str, int]:
        """Tasks by status, as the runs page shows them."""
        counts: dict[str, int] = {}
        for task in self.tasks:
            shown = self.task_status(task)
            counts[shown] = counts.get(shown, 0) + 1
        return counts


def load_run_view(
    run: RunHandle,
    *,
    with_transcripts: bool = True,
    messages_shown: int | None = None,
    tasks_detailed: int | None = None,
) -> RunView:
    """Read the run (ConfigError if there is none) into a RunView: every bus message, or the
    last `messages_shown`; every task's details, or `tasks_detailed` tasks'."""
    spec = run.spec
    # The streams first: a change made while the rest is read is then after the page's
    # position, so its event still reaches the page, which reloads.
    events = list(read_events(run.conn, run.keys.events))
    messages = run.bus.messages() if messages_shown is None else run.bus.latest(messages_shown)
    state = run.store.state()
    usage = parse_usage(run.run_id, run.conn.hgetall(run.keys.usage))
    tasks = run.board.snapshot()
    transcripts = (
        Transcripts(run.conn, run.keys, run.scripts).load_many([t.task_id for t in tasks])
        if with_transcripts
        else {}
    )
    return RunView(
        run_id=run.run_id,
        spec=spec,
        state=state,
        usage=usage,
        tasks=tasks,
        attempts=attempts_from(events, tasks, state.finished),
        messages=messages,
        transcripts=transcripts,
        last_event_id=events[-1].id if events else "0-0",
        last_message_id=messages[-1].id if messages else "0-0",
        detailed=most_relevant(tasks, tasks_detailed),
        forks=LineageRecords(run.conn, run.keys).forks(),
    )


def most_relevant(tasks: list[TaskState], limit: int | None) -> list[TaskState]:
    """`tasks` (plan order), or past `limit` the `limit` that matter most now, still in plan
    order: those changed last, a task still pending after every other (what runs, failed or
    just ended is what a watcher looks for)."""
    if limit is None or len(tasks) <= limit:
        return tasks
    ranked = sorted(
        range(len(tasks)),
        key=lambda i: (tasks[i].status is TaskStatus.PENDING, -tasks[i].updated_ms, i),
    )
    return [tasks[i] for i in sorted(ranked[:limit])]


def read_events(conn: redis.Redis, key: str) -> Iterator[TaskEvent]:
    """Every entry of an events stream, in pages (a long XRANGE would hold Redis)."""
    start = "-"
    while True:
        page = conn.xrange(key, start, "+", count=EVENTS_PAGE)
        for entry_id, fields in page:
            yield TaskEvent.model_validate({"id": entry_id, **fields})
        if len(page) < EVENTS_PAGE:
            return
        start = "(" + page[-1][0]


def entry_ms(entry_id: str) -> int:
    """The time part (epoch ms) of a stream entry id: when Redis wrote the change."""
    return int(entry_id.partition("-")[0])


def attempts_from(
    events: list[TaskEvent], tasks: list[TaskState], finished: bool
) -> list[AttemptRow]:
    """The attempts the events tell: each `in_progress` opens one on its task (its worker
    named by the entry), the next completed/failed/released/reclaimed ends it. An attempt
    still open when the run has finished ended unseen (its end left the stream)."""
    open_by_task: dict[str, AttemptRow] = {}
    attempts: list[AttemptRow] = []
    for event in events:
        if not event.task_id:
            continue
        if event.status is EventKind.IN_PROGRESS:
            attempt = AttemptRow(
                task_id=event.task_id,
                number=event.attempts,
                member_id=event.member_id,
                worker=event.worker or "unknown",
                token=event.token,
                start_ms=entry_ms(event.id),
            )
            open_by_task[event.task_id] = attempt
            attempts.append(attempt)
        elif event.status in ATTEMPT_ENDS and event.task_id in open_by_task:
            attempt = open_by_task.pop(event.task_id)
            attempt.end_ms = entry_ms(event.id)
            attempt.outcome = ATTEMPT_ENDS[event.status]
        elif event.status is EventKind.REASSIGNED and event.task_id in open_by_task:
            open_by_task[event.task_id].member_id = event.member_id
    if finished:
        for attempt in open_by_task.values():
            attempt.outcome = "unknown"
    stale = {t.task_id: t.stale_writes for t in tasks}
    for attempt in attempts:
        if attempt.outcome in ("released", "reclaimed"):
            attempt.stale_writes = stale.get(attempt.task_id, 0)
    return attempts
