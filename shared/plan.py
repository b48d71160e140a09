"""Plan normalization (AI4J §2.2-2.3): task ids made safe and unique, dependencies cleaned."""

from __future__ import annotations

from pydantic import BaseModel, Field

from shared.ids import normalize_id
from shared.models import TaskSpec


class RawTask(BaseModel):
    """A task as the planner wrote it, before normalization."""

    id: str | None = None
    member_id: str | None = None
    task: str = ""
    context: str | None = None
    depends_on: list[str] = Field(default_factory=list)


def normalize_tasks(raw_tasks: list[RawTask]) -> list[TaskSpec]:
    """Assign ids (`task_<seq>` when empty, `_<seq>` suffix when taken; one counter for both)."""
    seq = 1
    used: set[str] = set()
    tasks: list[TaskSpec] = []
    for raw in raw_tasks:
        task_id = normalize_id(raw.id)
        if task_id is None:
            task_id = f"task_{seq}"
            seq += 1
        while task_id in used:
            task_id = f"{task_id}_{seq}"
            seq += 1
        used.add(task_id)
        deps = normalize_dependencies(raw.depends_on)
        tasks.append(TaskSpec(id=task_id, member_id=raw.member_id, task=raw.task,
                              context=raw.context, depends_on=deps))
    return tasks


def normalize_dependencies(raw_deps: list[str]) -> list[str]:
    """Normalize each dependency id; drop blanks and duplicates, keeping first-seen order."""
    deps: dict[str, None] = {}
    for raw in raw_deps:
        dep = normalize_id(raw)
        if dep is not None:
            deps.setdefault(dep)
    return list(deps)
