"""The dispatch input: what a member is told about its task (AI4J §6.4, plus dependency outputs)."""

from __future__ import annotations

from shared.models import Envelope, TaskState
from shared.prompts import render
from shared.team import Member, RunOptions
from shared.text import shorten


def build_dispatch_input(*, member: Member, task: TaskState, objective: str, options: RunOptions,
                         dependencies: list[TaskState], history: list[Envelope]) -> str:
    """Render worker/prompts/dispatch.md; each section honours its include_* option."""
    return render(
        "worker", "dispatch.md",
        header=_header(member, task),
        objective_block=(f"Objective:\n{objective}\n\n"
                         if options.include_original_objective_in_dispatch else ""),
        task=task.task,
        context_block=(f"Additional context:\n{task.context}\n"
                       if options.include_task_context_in_dispatch and task.context else ""),
        dependencies_block=_dependencies(dependencies, options.dependency_output_chars),
        messages_block=_messages(history) if _wants_history(options) else "",
    )


def _header(member: Member, task: TaskState) -> str:
    lines = [f"Team member role: {member.display_name}"]
    if member.description and member.description.strip():
        lines.append(f"Expertise: {member.description}")
    lines.append(f"Task ID: {task.task_id}")
    if task.depends_on:
        lines.append(f"Dependencies: [{', '.join(task.depends_on)}]")
    return "\n".join(lines)


def _dependencies(dependencies: list[TaskState], limit_chars: int) -> str:
    if not dependencies:
        return ""
    lines = ["Dependency outputs:"]
    for dep in dependencies:
        output = (dep.output or "").strip()
        if len(output) > limit_chars:
            output = output[:limit_chars] + " [truncated]"
        lines.append(f"- {dep.task_id} ({dep.status.value}): {output}")
    return "\n".join(lines) + "\n"


def _wants_history(options: RunOptions) -> bool:
    return options.enable_message_bus and options.include_message_history_in_dispatch


def _messages(history: list[Envelope]) -> str:
    if not history:
        return ""
    lines = ["Recent team messages:"]
    lines += [f"- [{m.type}] {m.from_} -> {m.to or ''}: {shorten(m.content)}" for m in history]
    return "\n".join(lines) + "\n"
