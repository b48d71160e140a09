"""Plan normalization (AI4J's rules): task ids made safe and unique, dependencies cleaned."""

from __future__ import annotations

from pydantic import BaseModel, Field
from teamctl.shared.ids import normalize_id
from teamctl.shared.task_records import TaskSpec

MAX_BASE_ID_CHARS = 100
"""Longer planner ids are cut (keys allow 128 chars; dedupe suffixes need the rest)."""


class RawTask(BaseModel):
    """A task as the planner wrote it, before normalization."""

    id: str | None = None
    member_id: str | None = None
    task: str = ""
    context: str | None = None
    depends_on: list[str | None] = Field(default_factory=list)


def task_id_of(raw: str | None) -> str | None:
    """A task id or dependency as AI4J normalizes it, cut to a key-safe length; None if empty."""
    normalized = normalize_id(raw)
    if normalized is None:
        return None
    return normalized[:MAX_BASE_ID_CHARS].rstrip("_") or None


def normalize_tasks(raw_tasks: list[RawTask]) -> list[TaskSpec]:
    """Assign ids (`task_<seq>` when empty, `_<seq>` suffix when taken; one counter for both)."""
    seq = 1
    used: set[str] = set()
    tasks: list[TaskSpec] = []
    for raw in raw_tasks:
        task_id = task_id_of(raw.id)
        if task_id is None:
            task_id = f"task_{seq}"
            seq += 1
        while task_id in used:
            task_id = f"{task_id}_{seq}"
            seq += 1
        used.add(task_id)
        deps = normalize_dependencies(raw.depends_on)
        tasks.append(
            TaskSpec(
                id=task_id,
                member_id=raw.member_id,
                task=raw.task,
                context=raw.context,
                depends_on=deps,
            )
        )
    return tasks


def normalize_dependencies(raw_deps: list[str | None]) -> list[str]:
    """Normalize each dependency id; drop blanks and duplicates, keeping first-seen order."""
    deps: dict[str, None] = {}
    for raw in raw_deps:
        dep = task_id_of(raw)
        if dep is not None:
            deps.setdefault(dep)
    return list(deps)
