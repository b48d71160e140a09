"""Helpers for the worker tests (no tests here): a run stored in Redis, ready for execute_task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.models import TaskSpec
from teamctl.shared.runstore import RunStore, now_ms
from teamctl.shared.team import Member, ModelChoice, RunOptions, RunSpec


def make_run(conn: redis.Redis, run_id: str, *, models: dict[str, str], tasks: list[TaskSpec],
             workspace: Path, api_base: str, tools: dict[str, list[str]] | None = None,
             **options: Any) -> RunSpec:
    """Store a run spec with one member per entry of `models` and create its board."""
    members = [Member(id=member_id, name=f"Member {member_id}", model=model,
                      tools=(tools or {}).get(member_id, []))
               for member_id, model in models.items()]
    workspace.mkdir(parents=True, exist_ok=True)
    first = next(iter(models.values()))
    spec = RunSpec(run_id=run_id, team_id="t", objective="Test the worker", members=members,
                   options=RunOptions(**options),
                   models=ModelChoice(planner=first, synthesizer=first, member_default=first,
                                      api_base=api_base),
                   workspace_dir=str(workspace), created_ms=now_ms())
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(tasks)
    return spec


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool result messages a model request carries, in order."""
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def parsed(result: str) -> dict[str, Any]:
    """A tool result as JSON (fails on TOOL_ERROR results, which are not JSON)."""
    return json.loads(result)


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]
