"""A tolerant parser for planner output (as AI4J's): JSON, or JSON found inside prose.

A plan is model output: it yields only tasks (id, member, text, context, dependencies). Any other
key (tools, mcp, model, a member's definition) is dropped here, and a member id is only resolved
against the team file's members, so a plan never gives anyone a capability the team lacks.
"""

from __future__ import annotations

import json
from typing import Any

from teamctl.coordinator.runs.plan import RawTask

PLAN_KEYS = ("tasks", "plan", "delegations", "assignments")
ALIASES = {
    "id": ("id", "taskId", "task_id", "name"),
    "member_id": ("memberId", "member", "agent", "assignee"),
    "task": ("task", "instruction", "goal", "work", "input"),
    "context": ("context", "notes", "memo", "details"),
    "depends_on": ("dependsOn", "depends_on", "deps", "after"),
}


def parse_tasks(text: str | None) -> list[RawTask]:
    """Tasks from the planner's text; [] when nothing usable is found."""
    if not text or not text.strip():
        return []
    tasks = _parse_value(text.strip())
    if tasks:
        return tasks
    return _tasks_from(first_json_value(text))


def _parse_value(text: str) -> list[RawTask]:
    if not text.startswith(("[", "{")):
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []
    return _tasks_from(value)


def _tasks_from(value: Any) -> list[RawTask]:
    if isinstance(value, dict):
        items = next((value[k] for k in PLAN_KEYS if isinstance(value.get(k), list)), [value])
    elif isinstance(value, list):
        items = value
    else:
        return []
    tasks = [_task(item) for item in items if isinstance(item, dict)]
    return [t for t in tasks if t is not None]


def _first_present(item: dict[str, Any], field: str) -> tuple[bool, Any]:
    for key in ALIASES[field]:
        if key in item:
            return True, item[key]
    return False, None


def _string(item: dict[str, Any], field: str) -> str | None:
    """The first alias present wins, even when blank or not a string (then: None)."""
    _, value = _first_present(item, field)
    if not isinstance(value, str):
        return None
    return value.strip() or None


def _dependencies(item: dict[str, Any]) -> list[str]:
    _, value = _first_present(item, "depends_on")
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [v.strip() for v in value if isinstance(v, str) and v.strip()]
    return []


def _task(item: dict[str, Any]) -> RawTask | None:
    text = _string(item, "task")
    if text is None:
        return None
    return RawTask(
        id=_string(item, "id"),
        member_id=_string(item, "member_id"),
        task=text,
        context=_string(item, "context"),
        depends_on=[*_dependencies(item)],
    )


def why_no_tasks(text: str | None) -> str:
    """Why `parse_tasks` found no task in the planner's text, in a few words of our own (the
    text itself is model output: none of it is quoted)."""
    if not text or not text.strip():
        return "it was empty"
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return "no JSON in it"
    try:
        json.JSONDecoder().raw_decode(text, min(starts))
    except json.JSONDecodeError as exc:
        return f"its JSON does not parse: {exc.msg} at line {exc.lineno} column {exc.colno}"
    return "no task with a text in its JSON"


def first_json_value(text: str) -> Any:
    """The JSON value that starts at the first { or [ in `text` (the first fragment wins, as in
    AI4J); None when it does not parse."""
    starts = [i for i in (text.find("{"), text.find("[")) if i >= 0]
    if not starts:
        return None
    try:
        value, _end = json.JSONDecoder().raw_decode(text, min(starts))
    except json.JSONDecodeError:
        return None
    return value
