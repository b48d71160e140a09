"""One page of a task board, a planned run's or a persistent team's, as a model's listing asks
for it: optional status, offset and limit, in plan order, with how many tasks match.

A page reads only its own ids: from the board's order list, ready set or running set, and for a
status without an index of its own, task statuses a chunk at a time until the page is full; the
totals come from the board's counts. A run member's team_list_tasks (worker/runs/member_tools.py)
and a teammate's or the lead's list_tasks (shared/teams/task_pages.py) page through here.
"""

from __future__ import annotations

import redis
from pydantic import Field
from teamctl.shared.agent.tools import OptionalText, ToolArgs
from teamctl.shared.errors import ToolFailed
from teamctl.shared.keys import KeySpace
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.text import shorten

PAGE_DEFAULT = 50
PAGE_MAX = 200
SCAN_CHUNK = 500
"""Task statuses read per round trip while filtering by a status without its own index."""


class ListTasksArgs(ToolArgs):
    """Which page of the board."""

    status: OptionalText = None
    """Only tasks of this status: pending, ready, in_progress, completed, failed or blocked."""
    offset: int | None = Field(None, ge=0)
    """How many matching tasks to skip (default 0; the answer's next offset continues)."""
    limit: int | None = Field(None, ge=1, le=PAGE_MAX)
    """Tasks to show, at most 200 (default 50)."""


def status_filter(raw: str | None) -> str | None:
    """The status a listing keeps (None: all); ToolFailed naming the valid ones."""
    if raw is None:
        return None
    wanted = raw.strip().lower().replace("-", "_").replace(" ", "_")
    if wanted in {s.value for s in TaskStatus}:
        return wanted
    raise ToolFailed(
        f"unknown status {shorten(raw, 40)!r}; use one of {', '.join(s.value for s in TaskStatus)}"
    )


def page_ids(
    conn: redis.Redis, keys: KeySpace, status: str | None, offset: int, limit: int
) -> tuple[list[str], int]:
    """The ids of one page of tasks (of `status`, or all) in plan order, and how many match."""
    end = offset + limit - 1
    if status is None:
        return list(conn.lrange(keys.order, offset, end)), int(conn.llen(keys.order))
    if status == TaskStatus.READY:
        return list(conn.zrange(keys.ready, offset, end)), int(conn.zcard(keys.ready))
    if status == TaskStatus.IN_PROGRESS:  # a task per working member at most: small
        running = _in_plan_order(conn, keys, list(conn.smembers(keys.running)))
        return running[offset : end + 1], len(running)
    return _scanned_ids(conn, keys, status, offset, limit)


def _in_plan_order(conn: redis.Redis, keys: KeySpace, ids: list[str]) -> list[str]:
    pipe = conn.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(keys.task(task_id), "pos")
    positions = [int(pos or 0) for pos in pipe.execute()]
    return [task_id for _, task_id in sorted(zip(positions, ids, strict=True))]


def _scanned_ids(
    conn: redis.Redis, keys: KeySpace, status: str, offset: int, limit: int
) -> tuple[list[str], int]:
    """A page of a status without its own index: statuses read a chunk of ids at a time."""
    total = int(conn.hget(keys.counts, status) or 0)
    found: list[str] = []
    seen = start = 0
    while len(found) < limit:
        chunk = conn.lrange(keys.order, start, start + SCAN_CHUNK - 1)
        pipe = conn.pipeline(transaction=False)
        for task_id in chunk:
            pipe.hget(keys.task(task_id), "status")
        for task_id, task_status in zip(chunk, pipe.execute(), strict=True):
            if task_status == status:
                if seen >= offset and len(found) < limit:
                    found.append(task_id)
                seen += 1
        if len(chunk) < SCAN_CHUNK:
            return found, seen  # read to the end: the exact count
        start += SCAN_CHUNK
    return found, max(total, seen)
