"""The coordinator's two model roles, each a request a worker makes: the planner's, which asks for
a task DAG, and the plan made of its reply (parsed, normalized, or one task per member when nothing
usable came back); the synthesizer's, which merges the members' outputs (and says what never ran)
into the final answer."""

from __future__ import annotations

import json
from collections.abc import Mapping

from teamctl.coordinator.runs.plan import RawTask, normalize_tasks
from teamctl.coordinator.runs.plan_parser import parse_tasks, why_no_tasks
from teamctl.shared.agent.prompts import render
from teamctl.shared.runs.mcp_cache import OfferedTool
from teamctl.shared.runs.model_call_records import ModelCallRequest
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.output import MemberResult
from teamctl.shared.task_records import Plan, TaskState
from teamctl.shared.team_file import Member


def planner_prompt(
    objective: str, members: list[Member], mcp_tools: Mapping[str, list[OfferedTool]] | None = None
) -> str:
    """The planning prompt: the members (id, name, expertise, and their MCP tools: as listed
    by their servers when `mcp_tools` has the member, else as configured) and the objective."""
    return render(
        "teamctl.coordinator.runs",
        "plan.md",
        members=members,
        objective=objective,
        mcp_tools=dict(mcp_tools or {}),
    )


def planner_request(
    model: str,
    api_base: str | None,
    objective: str,
    members: list[Member],
    mcp_tools: Mapping[str, list[OfferedTool]] | None = None,
) -> ModelCallRequest:
    """The planner's model call, for a worker to make."""
    return ModelCallRequest(
        model=model,
        api_base=api_base,
        messages=[{"role": "user", "content": planner_prompt(objective, members, mcp_tools)}],
    )


def plan_from_reply(
    raw_text: str, objective: str, members: list[Member], options: RunOptions
) -> Plan:
    """Parse and normalize the planner's reply, falling back as the options say."""
    raw_tasks = parse_tasks(raw_text)
    if raw_tasks or not options.broadcast_on_planner_failure:
        return Plan(tasks=normalize_tasks(raw_tasks), raw_plan_text=raw_text)
    return Plan(
        tasks=normalize_tasks(fallback_tasks(objective, members)),
        raw_plan_text=raw_text,
        fallback=True,
        fallback_reason=why_no_tasks(raw_text),
    )


def fallback_tasks(objective: str, members: list[Member]) -> list[RawTask]:
    """One task per member when the planner produced nothing usable (as AI4J)."""
    return [
        RawTask(
            id=f"fallback_{i}",
            member_id=m.id,
            context="planner_fallback",
            task=(
                f"Focus on {m.description}. Objective: {objective}"
                if m.description and m.description.strip()
                else objective
            ),
        )
        for i, m in enumerate(members, start=1)
    ]


def synthesizer_prompt(
    objective: str, plan: Plan, results: list[MemberResult], not_run: list[TaskState]
) -> str:
    """The synthesis prompt: objective, plan JSON, each output or error, what never ran."""
    plan_json = json.dumps([t.model_dump() for t in plan.tasks], ensure_ascii=False)
    return render(
        "teamctl.coordinator.runs",
        "synthesize.md",
        objective=objective,
        plan_json=plan_json,
        results=results,
        not_run=not_run,
    )


def synthesizer_request(
    model: str,
    api_base: str | None,
    objective: str,
    plan: Plan,
    results: list[MemberResult],
    not_run: list[TaskState],
) -> ModelCallRequest:
    """The synthesizer's model call."""
    return ModelCallRequest(
        model=model,
        api_base=api_base,
        messages=[
            {"role": "user", "content": synthesizer_prompt(objective, plan, results, not_run)}
        ],
    )
