"""`teamctl diff RUN_A RUN_B`: two runs side by side as a person reads them. Outputs and task
texts are model text: every line is made printable and cut, and a long diff is bounded."""

from __future__ import annotations

import click
from teamctl.coordinator.advice import note
from teamctl.coordinator.cli.run_view import usage_text
from teamctl.coordinator.cli.table import table_lines
from teamctl.coordinator.runs.run_diff import diff_runs
from teamctl.shared.agent.replies import Usage
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.connection import connect
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.output import DiffRun, DiffTask, RunDiff, TaskDiff
from teamctl.shared.runs.run_refs import resolve_run
from teamctl.shared.text import counted, one_line, printable

DIFF_LINES = 40
"""How many lines of one task's output diff the text shows (--json has them all)."""
LINE_CHARS = 300
"""How much of one diff line the text shows."""
TEXT_CHARS = 200
"""How much of a task's text or the objective a line shows."""


def diff_command(redis_url: str, given_a: str, given_b: str, as_json: bool) -> None:
    """Compare the two runs and print the comparison (text, or the RunDiff JSON)."""
    run_a, run_b = two_runs(redis_url, given_a, given_b)
    diff = diff_runs(run_a, run_b)
    if as_json:
        click.echo(diff.model_dump_json(indent=2))
        return
    for line in diff_lines(diff):
        click.echo(line)


def two_runs(redis_url: str, given_a: str, given_b: str) -> tuple[RunHandle, RunHandle]:
    """The two runs given, both existing and not the same; a mistake is one line (ConfigError)
    before stderr says which runs the references named."""
    conn = connect(redis_url)
    named = [resolve_run(conn, given) for given in (given_a, given_b)]
    if named[0].run_id == named[1].run_id:
        raise ConfigError(
            f"{given_a} and {given_b} both name run {named[0].run_id}: give two different "
            "runs (`teamctl runs` lists them)"
        )
    run_a, run_b = (RunHandle.existing(conn, n.run_id) for n in named)
    for said in (n.said() for n in named):
        if said is not None:
            note(said)
    return run_a, run_b


def diff_lines(diff: RunDiff) -> list[str]:
    """The whole comparison: both runs, the objective, the plan, the outputs, the usage."""
    return [
        _run_line("A", diff.a),
        _run_line("B", diff.b),
        *_objective_lines(diff),
        *plan_lines(diff),
        *output_lines(diff),
        *usage_lines(diff),
    ]


def _run_line(name: str, run: DiffRun) -> str:
    live = " (in progress: compared as it stands)" if run.in_progress else ""
    lineage = f" ({run.lineage})" if run.lineage else ""
    reused = f"; {counted(run.reused_calls, 'model call')} reused" if run.reused_calls else ""
    return f"run {name}: {run.run_id}{lineage}, {run.status}{live}; {usage_text(run.usage)}{reused}"


def _objective_lines(diff: RunDiff) -> list[str]:
    if diff.same_objective:
        return ["objective: the same"]
    return [
        "objective differs:",
        f"  A: {one_line(diff.a.objective, TEXT_CHARS)}",
        f"  B: {one_line(diff.b.objective, TEXT_CHARS)}",
    ]


def plan_lines(diff: RunDiff) -> list[str]:
    """A count of what changed in the plan, then a line per task added, removed or changed."""
    same = len(diff.tasks) - len(diff.added) - len(diff.removed) - len(diff.changed)
    if not (diff.added or diff.removed or diff.changed):
        return [f"plan: the same {counted(same, 'task')}"]
    lines = [
        f"plan: {len(diff.added)} added, {len(diff.removed)} removed, "
        f"{len(diff.changed)} changed, {same} the same"
    ]
    for task in diff.tasks:
        if task.a is None and task.b is not None:
            lines.append(f"  added {task.task_id}: {_entry(task.b)}")
        elif task.b is None and task.a is not None:
            lines.append(f"  removed {task.task_id}: {_entry(task.a)}")
        elif task.changed and task.a is not None and task.b is not None:
            lines += [
                f"  changed {task.task_id} {name}: {_field(task.a, name)} -> {_field(task.b, name)}"
                for name in task.changed
            ]
    return lines


def _entry(task: DiffTask) -> str:
    """A plan entry on one line: member, task text, what it waits on."""
    after = f" after {_field(task, 'depends_on')}" if task.depends_on else ""
    return f"({_field(task, 'member')}{after}) {_field(task, 'task')}"


def _field(task: DiffTask, name: str) -> str:
    if name == "member":
        return one_line(task.member_id, TEXT_CHARS) or "-"
    if name == "depends_on":
        return ", ".join(sorted(task.depends_on)) or "nothing"
    return repr(one_line(task.task, TEXT_CHARS))


def output_lines(diff: RunDiff) -> list[str]:
    """For each task both runs have, whether its output is the same, else its bounded diff."""
    lines = []
    for task in diff.tasks:
        if task.a is None or task.b is None:
            continue
        lines += _output_lines(task, task.a, task.b, diff)
    return ["outputs:", *lines] if lines else []


def _output_lines(task: TaskDiff, a: DiffTask, b: DiffTask, diff: RunDiff) -> list[str]:
    if task.same_output is None:
        missing = [
            f"run {name} ({side.status})"
            for name, side in (("A", a), ("B", b))
            if side.output is None
        ]
        return [f"  {task.task_id}: no output in {' or '.join(missing)}"]
    if task.same_output:
        return [f"  {task.task_id}: same"]
    shown = ["    " + diff_line(line) for line in task.output_diff[:DIFF_LINES]]
    cut = len(task.output_diff) - len(shown)
    if cut > 0:
        shown.append(
            f"    ({counted(cut, 'more line')} of this diff not shown: "
            f"`teamctl diff {diff.a.run_id} {diff.b.run_id} --json` has it whole)"
        )
    return [f"  {task.task_id}: differs", *shown]


def diff_line(line: str) -> str:
    """A line of a diff made printable and cut, its leading mark and indentation kept."""
    line = printable(line).expandtabs(4).rstrip()
    return line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + "..."


def usage_lines(diff: RunDiff) -> list[str]:
    """Tokens and cost per task and in total, for each run, and B's difference from A."""
    rows = [
        (
            task.task_id,
            usage_text(task.a.usage) if task.a else "-",
            usage_text(task.b.usage) if task.b else "-",
            delta_text(
                task.a.usage if task.a else Usage(),
                task.b.usage if task.b else Usage(),
            ),
        )
        for task in diff.tasks
    ]
    rows.append(
        (
            "total",
            usage_text(diff.a.usage),
            usage_text(diff.b.usage),
            delta_text(diff.a.usage, diff.b.usage),
        )
    )
    return ["usage:", *table_lines(("task", "run A", "run B", "B - A"), rows)]


def delta_text(a: Usage, b: Usage) -> str:
    """B's tokens and cost less A's, signed: `+120 tokens, -$0.0010`; the cost `unpriced`
    when neither side has a priced call."""
    tokens = b.tokens - a.tokens
    sign = "-" if tokens < 0 else "+"
    said = f"{sign}{counted(abs(tokens), 'token')}"
    if a.cost_text() == "unpriced" and b.cost_text() == "unpriced":
        return f"{said}, unpriced"
    cost = b.cost_usd - a.cost_usd
    return f"{said}, {'-' if cost < 0 else '+'}${abs(cost):.4f}"
