"""The dispatch input: what a member is told about its task (AI4J's, plus dependency outputs)."""

from __future__ import annotations

from teamctl.shared.agent.prompts import render
from teamctl.shared.envelopes import Envelope
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskState
from teamctl.shared.team_file import Member

TRUNCATED = " [truncated]"


def build_dispatch_input(
    *,
    member: Member,
    task: TaskState,
    objective: str,
    options: RunOptions,
    dependencies: list[TaskState],
    history: list[Envelope],
    mcp_tools: list[str] | None = None,
) -> str:
    """Render worker/runs/prompts/dispatch.md; each section honours its include_* option.
    `mcp_tools` names the member's MCP tools (from the run's cache of the servers' lists)."""
    wants_history = options.enable_message_bus and options.include_message_history_in_dispatch
    return render(
        "teamctl.worker.runs",
        "dispatch.md",
        member=member,
        task=task,
        objective=objective,
        include_objective=options.include_original_objective_in_dispatch,
        include_context=options.include_task_context_in_dispatch,
        dependency_outputs=[
            (d.task_id, d.status.value, _truncated(d.output, options.dependency_output_chars))
            for d in dependencies
        ],
        history=history if wants_history else [],
        mcp_tools=mcp_tools or [],
    )


def _truncated(output: str | None, limit_chars: int) -> str:
    text = (output or "").strip()
    return text if len(text) <= limit_chars else text[:limit_chars] + TRUNCATED
