"""Plan approval (require_plan_approval): approve up front, ask on a terminal, or wait in Redis."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import click
from teamctl.coordinator.runs.worker_wait import WAKE_EVERY_S
from teamctl.shared.runs.run_records import Approval, RunStatus
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import Plan
from teamctl.shared.text import one_line

PLAN_TEXT_CHARS = 100_000
"""A task's text in the plan a person approves: on one line, but not cut short where it matters."""


class ApprovalMode(Enum):
    """How this coordinator obtains the decision."""

    AUTO = "auto"
    """`--approve-plan`: approved without asking."""
    PROMPT = "prompt"
    """An interactive terminal: show the plan and ask."""
    WAIT = "wait"
    """No terminal: wait for `teamctl approve RUN` / `teamctl reject RUN` from any shell."""


@dataclass(frozen=True)
class Decision:
    """The outcome of the approval step."""

    approved: bool
    reason: str | None = None
    cancelled: bool = False


def plan_table(plan: Plan) -> str:
    """The normalized plan as plain lines, for the terminal prompt. The planner wrote it: each
    task stays on its line with no escape sequence, so no task can draw a row of its own."""
    count = f"{len(plan.tasks)} task{'' if len(plan.tasks) == 1 else 's'}"
    lines = [f"Plan ({count}{', fallback' if plan.fallback else ''}):"]
    for task in plan.tasks:
        deps = f" after {', '.join(task.depends_on)}" if task.depends_on else ""
        member = one_line(task.member_id, 200) or "(first member)"
        lines.append(f"  {task.id} -> {member}{deps}: {one_line(task.task, PLAN_TEXT_CHARS)}")
    return "\n".join(lines)


def obtain_plan_decision(
    store: RunStore,
    plan: Plan,
    mode: ApprovalMode,
    *,
    notify: Callable[[str], None],
    should_stop: Callable[[], bool],
    phase: Callable[[RunStatus], None] = lambda status: None,
) -> Decision:
    """Return the recorded decision, making or awaiting it first if there is none yet; `phase`
    is told when the run starts waiting for it."""
    recorded = _recorded(store)
    if recorded is not None:
        return recorded
    if mode is ApprovalMode.AUTO:
        store.record_approval(True, "approved with --approve-plan")
    elif mode is ApprovalMode.PROMPT:
        click.echo(plan_table(plan), err=True)
        approved = click.confirm("Approve this plan?", default=True, err=True)
        store.record_approval(approved, None if approved else "rejected at the terminal")
    else:
        return _wait(store, notify, should_stop, phase)
    recorded = _recorded(store)
    assert recorded is not None
    return recorded


def _recorded(store: RunStore) -> Decision | None:
    state = store.state()
    if state.approval is None:
        return None
    return Decision(approved=state.approval is Approval.APPROVED, reason=state.approval_reason)


def _wait(
    store: RunStore,
    notify: Callable[[str], None],
    should_stop: Callable[[], bool],
    phase: Callable[[RunStatus], None],
) -> Decision:
    run_id = store.run_id
    store.set_status(RunStatus.AWAITING_APPROVAL)
    phase(RunStatus.AWAITING_APPROVAL)
    notify(
        f"plan awaits approval: `teamctl approve {run_id}` or "
        f"`teamctl reject {run_id} --reason TEXT` (`teamctl status {run_id}` shows it)"
    )
    while True:
        recorded = _recorded(store)
        if recorded is not None:
            return recorded
        if should_stop():
            return Decision(approved=False, reason="cancelled", cancelled=True)
        store.wait_for_wake(WAKE_EVERY_S)
