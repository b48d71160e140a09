"""The synthesizer: the request that merges member outputs (and says what never ran) into the
final answer, for a worker to make."""

from __future__ import annotations

import json

from teamctl.shared.agent.prompts import render
from teamctl.shared.model_calls import ModelCallRequest
from teamctl.shared.models import MemberResult, Plan, TaskState


def synthesizer_prompt(objective: str, plan: Plan, results: list[MemberResult],
                       not_run: list[TaskState]) -> str:
    """The synthesis prompt: objective, plan JSON, each output or error, what never ran."""
    plan_json = json.dumps([t.model_dump() for t in plan.tasks], ensure_ascii=False)
    return render("teamctl.coordinator", "synthesize.md", objective=objective, plan_json=plan_json,
                  results=results, not_run=not_run)


def synthesizer_request(model: str, api_base: str | None, objective: str, plan: Plan,
                        results: list[MemberResult],
                        not_run: list[TaskState]) -> ModelCallRequest:
    """The synthesizer's model call."""
    return ModelCallRequest(model=model, api_base=api_base, messages=[
        {"role": "user", "content": synthesizer_prompt(objective, plan, results, not_run)}])
