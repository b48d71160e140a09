"""Bounded views of a team's task board for models: `list_tasks` pages it (by status, offset and
limit; long texts shortened) and `get_task` shows one task whole, within tool_result_max_chars.

Both tools (a teammate's, worker/teams/teammate_tools.py, and the lead's,
coordinator/teams/lead_tools.py) answer through here. A page reads only its own tasks' hashes: the
ids come from the board's order list, ready set or running set, and a filter on another status reads
task statuses a chunk at a time until the page is full; the totals come from the board's counts.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field
from teamctl.shared.agent.tools import OptionalText, Text, ToolArgs
from teamctl.shared.errors import ToolFailed
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TASK_PREFIX, Store, TeamTask, TeamTasks
from teamctl.shared.text import shorten

PAGE_DEFAULT = 50
PAGE_MAX = 200
LISTED_CHARS = 200
"""How much of a task's subject, description, result and release reason a listing shows."""
LISTED_AFTER = 20
"""Dependencies a listing names per task (after_count says how many there are)."""
SCAN_CHUNK = 500
"""Task statuses read per round trip while filtering by a status without its own index."""
WRAPPER_CHARS = 300
"""Room kept for an answer's keys beside the tasks or texts it carries."""


class ListTasksArgs(ToolArgs):
    """list_tasks: which page of the board."""

    status: OptionalText = None
    """Only tasks of this status: pending, ready, in_progress, completed, failed or blocked."""
    offset: int | None = Field(None, ge=0)
    """How many matching tasks to skip (default 0; the answer's next_offset continues)."""
    limit: int | None = Field(None, ge=1, le=PAGE_MAX)
    """Tasks to show, at most 200 (default 50)."""


class GetTaskArgs(ToolArgs):
    """get_task: the task to show whole."""

    task_id: Text
    """A task's id (task_<n>, from list_tasks)."""


LIST_TASKS_DESCRIPTION = (
    "List one page of the team task board (optional status, offset, limit): id, status, "
    "subject, role, assignee, owner, dependencies (after), result, long texts shortened; says "
    "how many match and remain.")
GET_TASK_DESCRIPTION = ("Show one task of the team task board whole (its description and "
                        "result).")
"""The two tools' descriptions, the same for a teammate and the lead."""


def list_tasks(store: Store, args: ListTasksArgs, options: TeamOptions) -> dict[str, Any]:
    """One page of the board in number order, with how many tasks match and remain after it;
    texts shortened, the page cut further to fit tool_result_max_chars."""
    status = _status(args.status)
    offset, limit = args.offset or 0, args.limit or PAGE_DEFAULT
    tasks = TeamTasks(store)
    ids, total = page_ids(tasks, status, offset, limit)
    views = [listed(task) for task in read_tasks(tasks, ids)]
    views = _fitting(views, options.tool_result_max_chars - WRAPPER_CHARS)
    remaining = max(total - offset - len(views), 0)
    result: dict[str, Any] = {"action": "list_tasks", "ok": True, "status": status,
                              "total": total, "offset": offset, "returned": len(views),
                              "remaining": remaining,
                              "next_offset": offset + len(views) if remaining else None,
                              "tasks": views}
    if any([view.pop("_cut", False) for view in views]):  # a list: every view loses the mark
        result["note"] = (f"texts longer than {LISTED_CHARS} characters are shortened ('...'); "
                          "get_task(task_id) shows one task whole")
    return result


def get_task(store: Store, args: GetTaskArgs, options: TeamOptions) -> dict[str, Any]:
    """One task whole, its subject, description and result cut (saying so) only to keep the
    answer within tool_result_max_chars."""
    view = TeamTasks(store).get(args.task_id).view()
    room = options.tool_result_max_chars - WRAPPER_CHARS
    texts = {key: str(view[key] or "") for key in ("subject", "description", "result")}
    for _ in range(4):  # JSON escapes may lengthen a text: shrink again until it fits
        answer = {"action": "get_task", "ok": True, "task": {**view, **_cut_texts(texts, room)}}
        over = len(json.dumps(answer, ensure_ascii=False)) - WRAPPER_CHARS - room
        if over <= 0:
            break
        room -= over
    return answer


def page_ids(tasks: TeamTasks, status: str | None, offset: int,
             limit: int) -> tuple[list[str], int]:
    """The ids of one page of tasks (of `status`, or all) in number order, and how many match."""
    conn, keys = tasks.conn, tasks.keys
    end = offset + limit - 1
    if status is None:
        return list(conn.lrange(keys.order, offset, end)), int(conn.llen(keys.order))
    if status == TaskStatus.READY:
        return list(conn.zrange(keys.ready, offset, end)), int(conn.zcard(keys.ready))
    if status == TaskStatus.IN_PROGRESS:  # a task per working teammate at most: small
        running = sorted(conn.smembers(keys.running), key=_number)
        return running[offset:end + 1], len(running)
    return _scanned_ids(tasks, status, offset, limit)


def _scanned_ids(tasks: TeamTasks, status: str, offset: int,
                 limit: int) -> tuple[list[str], int]:
    """A page of a status without its own index: statuses read a chunk of ids at a time."""
    conn, keys = tasks.conn, tasks.keys
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


def read_tasks(tasks: TeamTasks, ids: list[str]) -> list[TeamTask]:
    """The tasks of `ids`, in that order, in one round trip (a task gone since is left out)."""
    pipe = tasks.conn.pipeline(transaction=False)
    for task_id in ids:
        pipe.hgetall(tasks.keys.task(task_id))
    return [TeamTask.from_hash(raw) for raw in pipe.execute() if raw]


def listed(task: TeamTask) -> dict[str, Any]:
    """What a listing shows of a task: its view with long texts shortened and at most
    LISTED_AFTER dependencies; `_cut` marks a view that lost something."""
    view = task.view()
    cut = False
    for key in ("subject", "description", "result", "released_reason", "error"):
        text = view[key]
        if text and len(text) > LISTED_CHARS:
            view[key], cut = shorten(text, LISTED_CHARS), True
    after = view["after"] or []
    if len(after) > LISTED_AFTER:
        view["after"], view["after_count"], cut = after[:LISTED_AFTER], len(after), True
    view["_cut"] = cut
    return view


def _fitting(views: list[dict[str, Any]], room: int) -> list[dict[str, Any]]:
    """The first views whose JSON fits `room` characters (at least one: each is shortened)."""
    kept: list[dict[str, Any]] = []
    used = 0
    for view in views:
        used += len(json.dumps(view, ensure_ascii=False)) + 2
        if kept and used > room:
            break
        kept.append(view)
    return kept


def _cut_texts(texts: dict[str, str], room: int) -> dict[str, str]:
    """The texts within `room` characters together: the shorter kept whole where it fits, the
    longer cut to what is left, each cut saying how long it was."""
    if sum(len(text) for text in texts.values()) <= room:
        return texts
    out: dict[str, str] = {}
    left, count = max(room, 0), len(texts)
    for key, text in sorted(texts.items(), key=lambda item: len(item[1])):
        share = left // count
        count -= 1
        if len(text) <= share:
            out[key] = text
        else:
            keep = max(share - 100, 0)
            out[key] = (text[:keep] + f"\n[truncated: the {key} has {len(text)} characters; "
                        f"the first {keep} are shown]")
        left -= len(out[key])
    return out


def _status(raw: str | None) -> str | None:
    """The status to filter by (None: all); ToolFailed naming the valid ones."""
    if raw is None:
        return None
    wanted = raw.strip().lower().replace("-", "_").replace(" ", "_")
    if wanted in {s.value for s in TaskStatus}:
        return wanted
    raise ToolFailed(f"unknown status {shorten(raw, 40)!r}; use one of "
                     f"{', '.join(s.value for s in TaskStatus)}")


def _number(task_id: str) -> int:
    return int(task_id.removeprefix(TASK_PREFIX))
