"""A run as a person reads it: what `teamctl status RUN` prints, and what `teamctl run` says on
stderr when a run ends without success. Model and provider text is made printable first."""

from __future__ import annotations

from teamctl.coordinator.advice import Advice
from teamctl.coordinator.cli.table import table_lines
from teamctl.shared.agent.replies import Usage
from teamctl.shared.board_summary import BoardSummary
from teamctl.shared.clock import now_ms
from teamctl.shared.runs.output import RunResult
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.task_records import TaskStatus, waiting_text
from teamctl.shared.text import counted, duration_text, one_line, printable

ERROR_CHARS = 500
"""How much of one error a summary line shows (`status --json` has it whole)."""
ENDED_WITHOUT_ANSWER = (TaskStatus.FAILED, TaskStatus.BLOCKED)


def has_answer(result: RunResult, summary: BoardSummary | None = None) -> bool:
    """Whether the run's output answers anything: it was synthesized from at least one
    completed task (AI4J's synthesizer also runs on nothing but failures). A result that holds
    only some tasks counts them by its board's `summary`."""
    if summary is not None:
        completed = summary.counts.get(TaskStatus.COMPLETED, 0) > 0
    else:
        completed = any(s.status is TaskStatus.COMPLETED for s in result.task_states)
    return bool(result.output) and completed


def usage_text(usage: Usage) -> str:
    """Tokens and cost, as a person reads them."""
    return f"{usage.tokens_text()}, {usage.cost_text()}"


def task_members(result: RunResult) -> dict[str, str]:
    """Each task's member: the one that ran it, else the one holding its claim, else the one the
    plan gave it (a blocked task never ran, yet a person wants to know whose it was)."""
    planned = {t.id: t.member_id for t in result.plan.tasks if t.member_id}
    ran = {m.task_id: m.member_id for m in result.member_results if m.member_id}
    return {
        s.task_id: who
        for s in result.task_states
        if (who := ran.get(s.task_id) or s.claimed_by or planned.get(s.task_id))
    }


def fallback_lines(result: RunResult) -> list[str]:
    """The line that says the planner's reply was not a plan, when the run fell back to one
    task per member (its tasks look planned otherwise)."""
    line = result.plan.fallback_line()
    return [] if line is None else [one_line(line, ERROR_CHARS)]


def failure_lines(result: RunResult) -> list[str]:
    """Each failed or blocked task with its reason, and the run's own error: one line each."""
    members = task_members(result)
    lines = []
    for state in result.task_states:
        if state.status not in ENDED_WITHOUT_ANSWER:
            continue
        who = members.get(state.task_id)
        where = f" ({who})" if who else ""
        if state.status is TaskStatus.FAILED:
            # A task failed at dispatch (an unknown member) never ran: no attempt to count.
            how = (
                f"after {counted(state.attempts, 'attempt')}" if state.attempts else "before it ran"
            )
            lines.append(
                f"task {state.task_id}{where} failed {how}: "
                f"{one_line(state.error, ERROR_CHARS) or 'no reason kept'}"
            )
        else:
            lines.append(
                f"task {state.task_id}{where} blocked: "
                f"{one_line(state.error, ERROR_CHARS) or 'a task it depends on failed'}"
            )
    if result.error and result.status is not RunStatus.CANCELLED:  # the last line says so
        lines.append(f"run error: {one_line(result.error, ERROR_CHARS)}")
    return lines


def ending_lines(result: RunResult, as_json: bool) -> list[str]:
    """What `teamctl run` adds on stderr after the run ends: the summary, then why it did not
    complete, and whether stdout holds an answer (the text printed above it, or with `as_json`
    the JSON's `output`) and how much of one."""
    ran = sum(s.attempts > 0 for s in result.task_states)  # claimed at least once
    lines = [
        f"run {result.run_id} {result.status} in {counted(result.rounds, 'round')}, "
        f"{counted(ran, 'task')} ran, {duration_text(result.total_duration_ms)}, "
        f"{usage_text(result.usage)}"
    ] + fallback_lines(result)
    if result.status is RunStatus.COMPLETED:
        return lines
    lines += failure_lines(result)
    return lines + [_answer_line(result, as_json)]


def _answer_line(result: RunResult, as_json: bool) -> str:
    """Whether a run that did not complete left an answer, and where what there is lies."""
    done = sum(s.status is TaskStatus.COMPLETED for s in result.task_states)
    of_tasks = f"{done} of {len(result.task_states)} tasks completed"
    if has_answer(result):
        return (
            f"the JSON's output is a partial answer: {of_tasks}"
            if as_json
            else f"the answer above is partial: {of_tasks}"
        )
    if result.output:  # synthesized from failures alone
        where = (
            "the JSON's output is the synthesizer's text"
            if as_json
            else f"`teamctl status {result.run_id} --json` has the synthesizer's text"
        )
        return f"no task completed, so there is no answer ({where})"
    how = "was cancelled" if result.status is RunStatus.CANCELLED else "ended"
    if not done:
        return f"no answer: the run {how} before its synthesis, and no task completed"
    where = (
        "the JSON's member_results hold their outputs"
        if as_json
        else f"`teamctl status {result.run_id}` shows their outputs"
    )
    return f"no answer: the run {how} before its synthesis ({of_tasks}; {where})"


def status_lines(
    result: RunResult,
    advice: Advice | None = None,
    paused_hint: str | None = None,
    summary: BoardSummary | None = None,
) -> list[str]:
    """`teamctl status RUN`: the run, its error, each task (status, attempts, duration, cost,
    error), its plan while it awaits approval, the commands that resume it while it awaits
    budget (`paused_hint`), and its answer. With a big board's `summary`, the result holds only
    the tasks that matter: the board's counts head them and a line after says what the table
    leaves out. The commands it suggests are spelled by `advice` (as this shell reaches
    teamctl, with the --redis-url it was given)."""
    advice = advice or Advice()
    lines = [
        f"{result.run_id}: {result.status}; rounds {result.rounds}; "
        f"{duration_text(result.total_duration_ms)}; {usage_text(result.usage)}",
        f"objective: {one_line(result.objective, ERROR_CHARS)}",
    ]
    if result.lineage:
        lines.append(f"lineage: {result.lineage.text()}")
    if result.forks:
        lines.append(f"replays and forks: {', '.join(result.forks)}")
    if result.error:
        lines.append(f"error: {one_line(result.error, ERROR_CHARS)}")
    lines += fallback_lines(result)
    if result.status is RunStatus.AWAITING_APPROVAL:
        from teamctl.coordinator.runs.approval import plan_table  # the approval flow's modules

        lines += [
            printable(plan_table(result.plan)),
            advice.spell(
                f"it waits for `teamctl approve {result.run_id}` or "
                f"`teamctl reject {result.run_id} --reason TEXT`"
            ),
        ]
    if result.status is RunStatus.AWAITING_BUDGET and paused_hint:
        lines.append(advice.spell(f"paused, its budget spent: {paused_hint}"))
    if summary is not None:
        lines.append(f"tasks: {counts_text(summary.counts)} ({summary.total:,} in all)")
    lines += _task_lines(result)
    if summary is not None:
        lines.append(advice.spell(_left_out_line(result.run_id, summary)))
    lines += model_usage_lines(result)
    if has_answer(result, summary):
        lines += ["answer:", printable(result.output or "")]
    return lines


def counts_text(counts: dict[TaskStatus, int]) -> str:
    """`2,500 completed, 8 in_progress`: tasks per status, in the statuses' order."""
    return ", ".join(f"{counts[s]:,} {s.value}" for s in TaskStatus if counts.get(s))


def _left_out_line(run_id: str, summary: BoardSummary) -> str:
    """What a big board's status table shows of it, and the command that lists every task."""
    shown = len(summary.tasks)
    unanswered = sum(s.status is not TaskStatus.IN_PROGRESS for s in summary.tasks)
    which = (
        f"in progress and the first {unanswered:,} of {summary.unanswered:,} failed or blocked"
        if summary.unanswered > unanswered
        else "in progress, failed or blocked"
    )
    return (
        f"only the tasks {which} are shown ({shown:,} of {summary.total:,}); "
        f"`teamctl tasks {run_id}` lists every task"
    )


def _task_lines(result: RunResult) -> list[str]:
    if not result.task_states:
        return []
    usage = {m.task_id: m.usage for m in result.member_results}
    members = task_members(result)
    # The answering model is a column only when some task's last call fell back.
    models = any(state.fallback_from for state in result.task_states)
    rows = []
    now = now_ms()
    for state in result.task_states:
        spent = usage.get(state.task_id)
        # A call held back by its provider's limit says so where an error would show.
        note = waiting_text(state.waiting_model, state.waiting_until_ms, now, state.status) or (
            one_line(state.error, ERROR_CHARS) if state.error else ""
        )
        row = [
            state.task_id,
            members.get(state.task_id, "-"),
            state.status.shown(result.status is RunStatus.AWAITING_APPROVAL),
            str(state.attempts),
            duration_text(state.duration_ms) if state.duration_ms else "-",
            usage_text(spent) if spent else "-",
            note,
        ]
        if models:
            row.insert(6, answered_text(state.model, state.fallback_from))
        rows.append(tuple(row))
    header = ["task", "member", "status", "attempts", "time", "cost", "error"]
    if models:
        header.insert(6, "model")
    return table_lines(tuple(header), rows)


def answered_text(model: str | None, fallback_from: str | None) -> str:
    """Which model answered a task's last call, and the one it fell back from."""
    if not model:
        return "-"
    return f"{model} (fallback for {fallback_from})" if fallback_from else model


def model_usage_lines(result: RunResult) -> list[str]:
    """Usage per model, once a fallback answered some call (roles' own models differing is
    the usual case, not worth the lines)."""
    if not any(share.fallback_calls for share in result.usage_by_model.values()):
        return []
    return ["usage by model:"] + [
        f"  {model}: {usage_text(share.usage)}, {counted(share.calls, 'call')}"
        + (f" ({share.fallback_calls} as a fallback)" if share.fallback_calls else "")
        for model, share in result.usage_by_model.items()
    ]
