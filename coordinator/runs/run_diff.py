"""Two planned runs side by side (`teamctl diff`): objective, plan, each task's output and its
usage, read from Redis alone; the facts whole, for the CLI to bound and sanitize."""

from __future__ import annotations

import difflib

from teamctl.shared.agent.replies import Usage
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.output import DiffRun, DiffTask, RunDiff, TaskDiff
from teamctl.shared.task_records import TaskState


def diff_runs(run_a: RunHandle, run_b: RunHandle) -> RunDiff:
    """What differs between run A and run B, each read as it stands (a live run too)."""
    side_a, tasks_a = _read(run_a)
    side_b, tasks_b = _read(run_b)
    order = [*tasks_a, *(t for t in tasks_b if t not in tasks_a)]
    tasks = [task_diff(t, tasks_a.get(t), tasks_b.get(t)) for t in order]
    return RunDiff(
        a=side_a,
        b=side_b,
        same_objective=side_a.objective == side_b.objective,
        tasks=tasks,
        added=[t.task_id for t in tasks if t.a is None],
        removed=[t.task_id for t in tasks if t.b is None],
        changed=[t.task_id for t in tasks if t.changed],
        tokens_delta=side_b.usage.tokens - side_a.usage.tokens,
        cost_delta_usd=side_b.usage.cost_usd - side_a.usage.cost_usd,
    )


def _read(run: RunHandle) -> tuple[DiffRun, dict[str, DiffTask]]:
    """A run's own facts and its tasks by id, in plan order (the board keeps every task)."""
    states = run.board.snapshot()
    side = DiffRun(
        run_id=run.run_id,
        status=run.store.state().status,
        objective=run.spec.objective,
        usage=run.store.usage(),
        lineage=run.spec.lineage.text() if run.spec.lineage else None,
        reused_calls=sum(s.replayed_steps for s in states)
        + LineageRecords(run.conn, run.keys).reused_calls(),
    )
    return side, {s.task_id: _task(s) for s in states}


def _task(state: TaskState) -> DiffTask:
    return DiffTask(
        member_id=state.member_id,
        task=state.task,
        depends_on=list(state.depends_on),
        status=state.status,
        output=state.output,
        usage=state.usage,
    )


def task_diff(task_id: str, a: DiffTask | None, b: DiffTask | None) -> TaskDiff:
    """One task across the two runs: what of its plan entry changed, and its output's diff."""
    usage_a, usage_b = (a.usage if a else Usage()), (b.usage if b else Usage())
    diff = TaskDiff(
        task_id=task_id,
        a=a,
        b=b,
        tokens_delta=usage_b.tokens - usage_a.tokens,
        cost_delta_usd=usage_b.cost_usd - usage_a.cost_usd,
    )
    if a is None or b is None:
        return diff
    diff.changed = [
        name
        for name, left, right in (
            ("member", a.member_id, b.member_id),
            ("task", a.task, b.task),
            ("depends_on", sorted(a.depends_on), sorted(b.depends_on)),
        )
        if left != right
    ]
    if a.output is not None and b.output is not None:
        diff.same_output = a.output == b.output
        diff.output_diff = [] if diff.same_output else output_diff(a.output, b.output)
    return diff


def output_diff(a: str, b: str) -> list[str]:
    """The unified diff of two outputs, a line each without its line end."""
    return list(
        difflib.unified_diff(
            a.splitlines(), b.splitlines(), fromfile="A", tofile="B", lineterm="", n=2
        )
    )
