"""Bounded views of a team's task board for models: `list_tasks` pages it (by status, offset and
limit; long texts shortened) and `get_task` shows one task whole, within tool_result_max_chars.

Both tools (a teammate's, worker/teams/teammate_tools.py, and the lead's,
coordinator/teams/lead_tools.py) answer through here. A page reads only its own tasks' hashes
(shared/board_pages.py, which a run member's listing pages through too); the cuts are
shared/agent/result_bounds.py's.
"""

from __future__ import annotations

from typing import Any

from teamctl.shared.agent.result_bounds import cut_to_fit, fitting
from teamctl.shared.agent.tools import Text, ToolArgs
from teamctl.shared.board_pages import PAGE_DEFAULT, ListTasksArgs, page_ids, status_filter
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import Store, TeamTask, TeamTasks
from teamctl.shared.text import shorten

__all__ = [
    "GET_TASK_DESCRIPTION",
    "LIST_TASKS_DESCRIPTION",
    "GetTaskArgs",
    "ListTasksArgs",
    "get_task",
    "list_tasks",
]

LISTED_CHARS = 200
"""How much of a task's subject, description, result and release reason a listing shows."""
LISTED_AFTER = 20
"""Dependencies a listing names per task (after_count says how many there are)."""
WRAPPER_CHARS = 300
"""Room kept for an answer's keys beside the tasks or texts it carries."""


class GetTaskArgs(ToolArgs):
    """get_task: the task to show whole."""

    task_id: Text
    """A task's id (task_<n>, from list_tasks)."""


LIST_TASKS_DESCRIPTION = (
    "List one page of the team task board (optional status, offset, limit): id, status, "
    "subject, role, assignee, owner, dependencies (after), result, long texts shortened; says "
    "how many match and remain."
)
GET_TASK_DESCRIPTION = "Show one task of the team task board whole (its description and result)."
"""The two tools' descriptions, the same for a teammate and the lead."""


def list_tasks(store: Store, args: ListTasksArgs, options: TeamOptions) -> dict[str, Any]:
    """One page of the board in number order, with how many tasks match and remain after it;
    texts shortened, the page cut further to fit tool_result_max_chars."""
    status = status_filter(args.status)
    offset, limit = args.offset or 0, args.limit or PAGE_DEFAULT
    tasks = TeamTasks(store)
    ids, total = page_ids(tasks.conn, tasks.keys, status, offset, limit)
    views = [listed(task) for task in read_tasks(tasks, ids)]
    views = fitting(views, options.tool_result_max_chars - WRAPPER_CHARS)
    remaining = max(total - offset - len(views), 0)
    result: dict[str, Any] = {
        "action": "list_tasks",
        "ok": True,
        "status": status,
        "total": total,
        "offset": offset,
        "returned": len(views),
        "remaining": remaining,
        "next_offset": offset + len(views) if remaining else None,
        "tasks": views,
    }
    if any([view.pop("_cut", False) for view in views]):  # a list: every view loses the mark
        result["note"] = (
            f"texts longer than {LISTED_CHARS} characters are shortened ('...'); "
            "get_task(task_id) shows one task whole"
        )
    return result


def get_task(store: Store, args: GetTaskArgs, options: TeamOptions) -> dict[str, Any]:
    """One task whole, its subject, description and result cut (saying so) only to keep the
    answer within tool_result_max_chars."""
    view = TeamTasks(store).get(args.task_id).view()
    return {
        "action": "get_task",
        "ok": True,
        "task": cut_to_fit(
            view,
            ["subject", "description", "result"],
            options.tool_result_max_chars - WRAPPER_CHARS,
        ),
    }


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
