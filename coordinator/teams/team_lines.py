"""A persistent team's requests and tasks as rows of cells, for a person: the `team` verbs and the
lead's REPL print the same listings (under the same headers)."""

from __future__ import annotations

from teamctl.shared.teams.tasks import TeamTask
from teamctl.shared.teams.teammates import TeamRequest
from teamctl.shared.text import one_line

REQUEST_HEADER = ("request", "kind", "from", "to", "status", "detail")
TASK_HEADER = ("task", "status", "owner", "role", "after", "subject")


def request_cells(r: TeamRequest) -> tuple[str, ...]:
    """One request under REQUEST_HEADER: its response once answered, else its payload."""
    return (
        r.id,
        r.kind.value,
        r.from_,
        r.to,
        r.status.value,
        one_line(r.response or r.payload, 80),
    )


def task_cells(t: TeamTask) -> tuple[str, ...]:
    """One task under TASK_HEADER: its owner, else `for` its assignee; the tasks it waits on."""
    who = t.owner or (f"for {t.assignee}" if t.assignee else "-")
    return (
        t.task_id,
        t.status.value,
        who,
        t.role or "-",
        ",".join(t.depends_on) or "-",
        one_line(t.subject, 80),
    )
