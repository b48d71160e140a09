"""The synthesizer: merges member outputs (and says what never ran) into the final answer."""

from __future__ import annotations

import json

from shared.llm import ModelClient, ModelReply
from shared.models import MemberResult, Plan, TaskState, TaskStatus
from shared.prompts import render


def synthesizer_prompt(objective: str, plan: Plan, results: list[MemberResult],
                       not_run: list[TaskState]) -> str:
    plan_json = json.dumps([t.model_dump() for t in plan.tasks], ensure_ascii=False)
    return render("coordinator", "synthesize.md", objective=objective, plan_json=plan_json,
                  member_outputs="\n".join(_result_lines(r) for r in results) or "(none)",
                  not_run=_not_run(not_run))


def _result_lines(result: MemberResult) -> str:
    head = f"- memberId={result.member_id}"
    if result.member_name is not None:
        head += f", name={result.member_name}"
    if result.task_status == TaskStatus.COMPLETED:
        return f"{head}\n  output: {result.output or ''}"
    return f"{head}\n  error: {result.error}"


def _not_run(tasks: list[TaskState]) -> str:
    if not tasks:
        return ""
    lines = ["", "Tasks that never ran:"]
    lines += [f"- {t.task_id} ({t.status.value}): {t.error or t.detail or ''}" for t in tasks]
    return "\n".join(lines)


def synthesize(client: ModelClient, model: str, api_base: str | None, objective: str, plan: Plan,
               results: list[MemberResult], not_run: list[TaskState]) -> ModelReply:
    prompt = synthesizer_prompt(objective, plan, results, not_run)
    return client.complete(model, [{"role": "user", "content": prompt}], api_base=api_base)
