"""Server-sent events from Redis streams: one XREAD BLOCK over a page's streams (a run's
`events` and `bus`, a team's, or the events of every live run on the runs page), so Redis
works when something happens, not on a timer. Each SSE event's id is the cursor of all the
page's streams after it (their last ids, joined by '/'), so a browser that reconnects sends it
back as Last-Event-ID and resumes exactly where it stopped."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis
from teamctl.shared.task_records import EventKind

STREAM_ID = re.compile(r"\d{1,20}-\d{1,20}")
READ_COUNT = 200
IDLE_BLOCK_MS = 60_000
"""How long one XREAD waits before the stream sends a keep-alive comment: an open page costs one
command a minute while nothing happens."""
SEPARATOR = "/"
RETRY_MS = 2000
"""How long a browser waits before it reconnects a stream that ended without `end`."""


@dataclass(frozen=True)
class Source:
    """One stream a page follows: its key, what its entries are ("task", "message" or "run",
    a run created), and which run or team it belongs to (the runs page follows several)."""

    key: str
    kind: str
    owner: str


def parse_cursor(text: str | None, count: int) -> list[str] | None:
    """A cursor of `count` stream ids, or None if `text` is not one (then the caller starts
    from its own position: a header is untrusted input and never reaches Redis unchecked)."""
    if not text:
        return None
    parts = text.split(SEPARATOR)
    if len(parts) != count or not all(STREAM_ID.fullmatch(p) for p in parts):
        return None
    return parts


def _order(entry_id: str, rank: int) -> tuple[int, int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), rank, int(seq)


def frame(event: str, data: dict[str, Any], event_id: str) -> str:
    """One SSE event (data is one line of JSON: no newline can split it)."""
    return f"id: {event_id}\nevent: {event}\ndata: {json.dumps(data)}\n\n"


def payload(source: Source, entry_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """What the page is told of an entry: ids and states, never a message's content (the page
    reloads its HTML, escaped by the server, to show that)."""
    if source.kind == "run":
        return {"owner": fields.get("run_id", ""), "id": entry_id}
    if source.kind == "task":
        return {
            "owner": source.owner,
            "id": entry_id,
            "task_id": fields.get("task_id", ""),
            "status": fields.get("status", ""),
            "member_id": fields.get("member_id", ""),
            "worker": fields.get("worker", ""),
            "mate": fields.get("mate", ""),
        }
    return {
        "owner": source.owner,
        "id": entry_id,
        "from": fields.get("from", ""),
        "to": fields.get("to", ""),
        "type": fields.get("type", ""),
        "task_id": fields.get("task_id", ""),
    }


async def follow(
    conn: Any,
    sources: list[Source],
    cursor: list[str],
    ended: Callable[[], Awaitable[bool]] | None = None,
    idle_block_ms: int = IDLE_BLOCK_MS,
) -> AsyncIterator[str]:
    """SSE frames for every entry after `cursor` on `sources` (a redis.asyncio client `conn`),
    merged in time order. With `ended` (a run's own page) the run's end, its `run.end` entry or
    `ended()` once nothing is left to read, sends an `end` event and stops; without it (the runs
    page, a team) it follows until the page goes."""
    position = dict(zip((s.key for s in sources), cursor, strict=True))
    by_key = {s.key: (rank, s) for rank, s in enumerate(sources)}
    block: int | None = None  # the first read catches up without waiting
    yield f"retry: {RETRY_MS}\n\n"
    while True:
        try:
            reply = await conn.xread(position, count=READ_COUNT, block=block)
        except redis.RedisError:
            # Redis went away or timed out: end the response; the browser reconnects after
            # RETRY_MS with the last id it got, and nothing is skipped.
            return
        if not reply:
            if block is None and ended is not None and await ended():
                yield frame("end", {}, SEPARATOR.join(position.values()))
                return
            if block is not None:
                yield ": idle\n\n"
            block = idle_block_ms
            continue
        entries = sorted(
            ((eid, fields, key) for key, items in reply for eid, fields in items),
            key=lambda e: _order(e[0], by_key[e[2]][0]),
        )
        finished = False
        for entry_id, fields, key in entries:
            position[key] = entry_id
            source = by_key[key][1]
            cursor_text = SEPARATOR.join(position.values())
            if fields.get("status") == EventKind.RUN_END:
                finished = True
                if ended is None:  # the runs page: that run's row changes
                    yield frame("state", {"owner": source.owner, "id": entry_id}, cursor_text)
                continue
            if source.kind == "task" and not fields.get("task_id") and not fields.get("mate"):
                # The run as a whole moved (its plan written, a signal to its coordinator): the
                # page shows the run's status and graph, so it reloads them too.
                yield frame("state", {"owner": source.owner, "id": entry_id}, cursor_text)
                continue
            event = {"task": "task", "run": "run"}.get(source.kind, "message")
            yield frame(event, payload(source, entry_id, fields), cursor_text)
        if finished and ended is not None:  # a run's own page: the run is over
            yield frame("end", {}, SEPARATOR.join(position.values()))
            return
        block = None  # drain what came meanwhile before blocking again
