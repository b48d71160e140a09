"""A persistent team's requests and tasks as one line each, for a person: the `team` verbs and the
lead's REPL print the same lines."""

from __future__ import annotations

from teamctl.shared.teams.tasks import TeamTask
from teamctl.shared.teams.teammates import TeamRequest
from teamctl.shared.text import flat, one_line


def request_line(r: TeamRequest) -> str:
    """One request for a person: id, kind, from -> to, status, its response or payload."""
    return (f"{r.id}\t{r.kind.value}\t{flat(r.from_)} -> {flat(r.to)}\t{r.status.value}\t"
            f"{one_line(r.response or r.payload, 80)}")


def task_line(t: TeamTask) -> str:
    """One task for a person: id, status, owner (or assignee), role, dependencies, subject."""
    who = flat(t.owner) or (f"for {flat(t.assignee)}" if t.assignee else "-")
    after = f"after {flat(','.join(t.depends_on))}" if t.depends_on else "-"
    return (f"{t.task_id}\t{t.status.value}\t{who}\t{flat(t.role) or '-'}\t{after}\t"
            f"{one_line(t.subject, 80)}")
