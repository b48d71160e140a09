"""The planner: the request that asks a model for a task DAG, and the plan made of its reply
(parsed, normalized, or one task per member when nothing usable came back)."""

from __future__ import annotations

from collections.abc import Mapping

from teamctl.coordinator.plan import RawTask, normalize_tasks
from teamctl.coordinator.plan_parser import parse_tasks
from teamctl.shared.agent.prompts import render
from teamctl.shared.mcp_cache import OfferedTool
from teamctl.shared.model_calls import ModelCallRequest
from teamctl.shared.models import Plan
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.team_file import Member


def planner_prompt(objective: str, members: list[Member],
                   mcp_tools: Mapping[str, list[OfferedTool]] | None = None) -> str:
    """The planning prompt: the members (id, name, expertise, and their MCP tools: as listed
    by their servers when `mcp_tools` has the member, else as configured) and the objective."""
    return render("teamctl.coordinator", "plan.md", members=members, objective=objective,
                  mcp_tools=dict(mcp_tools or {}))


def planner_request(model: str, api_base: str | None, objective: str, members: list[Member],
                    mcp_tools: Mapping[str, list[OfferedTool]] | None = None
                    ) -> ModelCallRequest:
    """The planner's model call, for a worker to make."""
    return ModelCallRequest(model=model, api_base=api_base, messages=[
        {"role": "user", "content": planner_prompt(objective, members, mcp_tools)}])


def plan_from_reply(raw_text: str, objective: str, members: list[Member],
                    options: RunOptions) -> Plan:
    """Parse and normalize the planner's reply, falling back as the options say."""
    raw_tasks = parse_tasks(raw_text)
    fallback = False
    if not raw_tasks and options.broadcast_on_planner_failure:
        raw_tasks, fallback = fallback_tasks(objective, members), True
    return Plan(tasks=normalize_tasks(raw_tasks), raw_plan_text=raw_text, fallback=fallback)


def fallback_tasks(objective: str, members: list[Member]) -> list[RawTask]:
    """One task per member when the planner produced nothing usable (AI4J §3.4)."""
    return [
        RawTask(id=f"fallback_{i}", member_id=m.id, context="planner_fallback",
                task=(f"Focus on {m.description}. Objective: {objective}"
                      if m.description and m.description.strip() else objective))
        for i, m in enumerate(members, start=1)
    ]
