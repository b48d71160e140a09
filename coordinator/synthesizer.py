"""The synthesizer: merges member outputs (and says what never ran) into the final answer."""

from __future__ import annotations

import json

from teamctl.shared.agent.llm import ModelClient, ModelReply
from teamctl.shared.agent.prompts import render
from teamctl.shared.models import MemberResult, Plan, TaskState


def synthesizer_prompt(objective: str, plan: Plan, results: list[MemberResult],
                       not_run: list[TaskState]) -> str:
    """The synthesis prompt: objective, plan JSON, each output or error, what never ran."""
    plan_json = json.dumps([t.model_dump() for t in plan.tasks], ensure_ascii=False)
    return render("teamctl.coordinator", "synthesize.md", objective=objective, plan_json=plan_json,
                  results=results, not_run=not_run)


def synthesize(client: ModelClient, model: str, api_base: str | None, objective: str, plan: Plan,
               results: list[MemberResult], not_run: list[TaskState]) -> ModelReply:
    """One synthesizer model call; its error propagates (the run records it)."""
    prompt = synthesizer_prompt(objective, plan, results, not_run)
    return client.complete(model, [{"role": "user", "content": prompt}], api_base=api_base)
