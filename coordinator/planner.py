"""The planner: asks a model for a task DAG, parses it, falls back to one task per member."""

from __future__ import annotations

from teamctl.coordinator.plan_parser import parse_tasks
from teamctl.shared.agent.llm import ModelClient, ModelReply
from teamctl.shared.agent.prompts import render
from teamctl.shared.models import Plan
from teamctl.shared.plan import RawTask, normalize_tasks
from teamctl.shared.team import Member, RunOptions


def planner_prompt(objective: str, members: list[Member]) -> str:
    """The planning prompt: the members (id, name, expertise) and the objective."""
    return render("teamctl.coordinator", "plan.md", members=members, objective=objective)


def make_plan(client: ModelClient, model: str, api_base: str | None, objective: str,
              members: list[Member], options: RunOptions) -> tuple[Plan, ModelReply]:
    """Call the planner model and normalize its plan; a model error propagates (run fails)."""
    prompt = planner_prompt(objective, members)
    reply = client.complete(model, [{"role": "user", "content": prompt}], api_base=api_base)
    raw_text = reply.content or ""
    raw_tasks = parse_tasks(raw_text)
    fallback = False
    if not raw_tasks and options.broadcast_on_planner_failure:
        raw_tasks, fallback = fallback_tasks(objective, members), True
    return Plan(tasks=normalize_tasks(raw_tasks), raw_plan_text=raw_text, fallback=fallback), reply


def fallback_tasks(objective: str, members: list[Member]) -> list[RawTask]:
    """One task per member when the planner produced nothing usable (AI4J §3.4)."""
    return [
        RawTask(id=f"fallback_{i}", member_id=m.id, context="planner_fallback",
                task=(f"Focus on {m.description}. Objective: {objective}"
                      if m.description and m.description.strip() else objective))
        for i, m in enumerate(members, start=1)
    ]
