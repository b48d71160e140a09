"""Following a live run from outside it: its `events` stream (task changes, written by the board
scripts) and its `bus`, read with XREAD BLOCK and merged in time order until the run ends. The
CLI's followers (`messages --follow`, `tasks --follow`, `events`) and the Python API's
`Run.events()` and `Run.wait()` read through these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, TypeVar

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import READ_BATCH, MessageBus, envelope_from_stream
from teamctl.shared.envelopes import Envelope
from teamctl.shared.redis.connection import MAX_BLOCK_MS, block_ms, blocking_client
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.output import MessageEvent, TaskChange
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import EventKind, TaskEvent

FOLLOW_BLOCK_MS = 500
"""How long one XREAD BLOCK waits before looking again at whether the run has ended."""
START = "0-0"

# Invariant: Tail.read returns a list, which its callers may change.
T = TypeVar("T")


class Tail(Protocol[T]):
    """A reader of one or more streams that keeps its own position."""

    def read(self, block_ms: int | None) -> list[T]:
        """What arrived after the last read, in order, waiting up to `block_ms` (None: no wait)."""
        ...


@dataclass
class BusTail:
    """The bus after `after_id`, as a Tail."""

    bus: MessageBus
    after_id: str = START

    def read(self, block_ms: int | None) -> list[Envelope]:
        messages = self.bus.tail(self.after_id, block_ms=block_ms)
        if messages:
            self.after_id = messages[-1].id
        return messages


def tailed(tail: Tail[T], has_ended: Callable[[], bool]) -> Iterator[T]:
    """Read `tail` with XREAD BLOCK until `has_ended`, then drain it (also the Python API's
    `Run.events()`)."""
    while True:
        # Read the status before reading the streams: what was written before the end is
        # then always yielded by the non-blocking drain that follows.
        ended = has_ended()
        items = tail.read(None if ended else FOLLOW_BLOCK_MS)
        yield from items
        if ended and not items:
            return


def run_ended(store: RunStore) -> bool:
    """Finished, or expired meanwhile: either way no more messages will come."""
    return store.state().finished or not store.exists()


Parse = Callable[[str, dict[str, str]], Any]


def entry_ms(entry_id: str) -> int:
    """The time part (epoch ms) of a stream entry id."""
    return int(entry_id.partition("-")[0])


def _order(entry_id: str, rank: int) -> tuple[int, int, int]:
    """Where an entry goes in the merged order: by time, then stream rank (task changes before
    the messages written in the same millisecond, which they cause), then sequence."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), rank, int(seq or 0)


@dataclass
class Stream:
    """One stream of a MergedTail: its key, where reading resumes, how to parse an entry."""

    key: str
    after_id: str
    parse: Parse


@dataclass
class MergedTail:
    """Several streams of one server read with one XREAD and merged in time order (a Tail)."""

    conn: redis.Redis
    streams: list[Stream]
    batch: int = READ_BATCH
    name: str | None = None
    """How its blocking connection shows in CLIENT LIST."""

    @cached_property
    def blocking_conn(self) -> redis.Redis:
        return blocking_client(self.conn, self.name)

    def close(self) -> None:
        """Close the blocking connection (a follower that stops must not hold one open)."""
        if "blocking_conn" in self.__dict__:
            self.blocking_conn.connection_pool.disconnect()

    def read(self, wait_ms: int | None) -> list[Any]:
        """The entries after each stream's position, merged; a stream that filled its batch may
        have more, so nothing later than its last entry is taken yet (read on the next call)."""
        positions = {s.key: s.after_id for s in self.streams}
        # Redis's clock before the read: every entry of an earlier millisecond, in any stream,
        # was written before it, so this read sees it; one of this millisecond or later may
        # still be joined by an entry of another stream that must go before it (a live follow
        # only: the drain after the end takes everything).
        settled_ms = (
            _server_ms(self.conn) if wait_ms is not None and len(self.streams) > 1 else None
        )
        reply = (
            self.conn.xread(positions, count=self.batch)
            if wait_ms is None
            else self.blocking_conn.xread(positions, count=self.batch, block=block_ms(wait_ms))
        )
        read = {key: entries for key, entries in reply or []}
        ranked = [(rank, s, read.get(s.key, [])) for rank, s in enumerate(self.streams)]
        full = [
            _order(entries[-1][0], rank)
            for rank, _, entries in ranked
            if len(entries) >= self.batch
        ]
        if settled_ms is not None:
            full.append((settled_ms, -1, 0))  # later entries wait for the next read (at once)
        cutoff = min(full) if full else None
        merged: list[tuple[tuple[int, int, int], Stream, str, dict[str, str]]] = [
            (_order(eid, rank), stream, eid, fields)
            for rank, stream, entries in ranked
            for eid, fields in entries
            if cutoff is None or _order(eid, rank) <= cutoff
        ]
        merged.sort(key=lambda item: item[0])
        for _, stream, eid, _ in merged:
            stream.after_id = eid
        return [stream.parse(eid, fields) for _, stream, eid, fields in merged]


def _server_ms(conn: redis.Redis) -> int:
    """Redis's clock, in epoch milliseconds (stream ids take their time from it)."""
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def task_event(entry_id: str, fields: dict[str, str]) -> TaskEvent:
    return TaskEvent.model_validate({"id": entry_id, **fields})


@dataclass
class TaskChanges:
    """Turns events-stream entries into TaskChange lines: a plan's `created` (no task id) into
    one line per task on the board, run.* wake-ups into none."""

    board: TaskBoard

    def of(self, event: TaskEvent) -> list[TaskChange]:
        at_ms = entry_ms(event.id)
        if event.status is EventKind.CREATED and not event.task_id:
            return [
                TaskChange(
                    id=event.id,
                    task_id=t.task_id,
                    status=EventKind.CREATED,
                    member_id=t.member_id,
                    attempts=0,
                    at_ms=at_ms,
                )
                for t in self.board.snapshot()
            ]
        if not event.task_id:
            return []  # run.stop / .approval / .end: a wake-up, not a task change
        return [
            TaskChange(
                id=event.id,
                task_id=event.task_id,
                status=event.status,
                member_id=event.member_id,
                attempts=event.attempts,
                at_ms=at_ms,
            )
        ]


def last_entry_id(conn: redis.Redis, key: str) -> str:
    """The id of the stream's last entry (START when it is empty): follow from there."""
    last = conn.xrevrange(key, count=1)
    return last[0][0] if last else START


def wait_for_end(run: RunHandle, deadline: float | None) -> bool:
    """Block until the run has ended (or expired), reading its events stream, where its end
    writes a `run.end` wake-up; False if the monotonic `deadline` came first."""
    after_id = last_entry_id(run.conn, run.keys.events)  # before the state: no end is missed
    reader = blocking_client(run.conn, events_reader_name(run.run_id))
    try:
        ended = run_ended(run.store)
        while not ended:
            wait_ms = MAX_BLOCK_MS if deadline is None else (deadline - time.monotonic()) * 1000
            if wait_ms <= 0:
                return False
            reply = reader.xread(
                {run.keys.events: after_id},
                count=READ_BATCH,
                block=block_ms(min(wait_ms, MAX_BLOCK_MS)),
            )
            end_seen = False
            for _, entries in reply or []:
                after_id = entries[-1][0]
                end_seen = end_seen or any(f.get("status") == EventKind.RUN_END for _, f in entries)
            # The whole state is read again only when the run may have ended: its end entry, or
            # a quiet block (a run that expired writes none), not on each of its task changes.
            if end_seen or not reply:
                ended = run_ended(run.store)
        return True
    finally:
        reader.connection_pool.disconnect()


def run_events(
    run: RunHandle,
    also_ended: Callable[[], bool] = lambda: False,
) -> Iterator[TaskChange | MessageEvent]:
    """The run's task changes and bus messages in one order, from its start until it ends (or
    `also_ended` says nothing more will come)."""
    changes = TaskChanges(run.board)
    tail = MergedTail(
        run.conn,
        [
            Stream(run.keys.events, START, task_event),
            Stream(run.keys.bus, START, envelope_from_stream),
        ],
        name=events_reader_name(run.run_id),
    )
    try:
        for item in tailed(tail, lambda: also_ended() or run_ended(run.store)):
            if isinstance(item, TaskEvent):
                yield from changes.of(item)
            else:
                yield MessageEvent(message=item)
    finally:  # also when the caller stops early (break, close): no connection left behind
        tail.close()


def events_reader_name(run_id: str) -> str:
    """The CLIENT LIST name of the connection that follows a run's events."""
    return f"teamctl-events:{run_id}"
