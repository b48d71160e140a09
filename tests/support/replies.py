"""What the scripted models answer in a planned run (including replies held until a test says),
and what a member's model request carries: its task, its tools, its tool results."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from tests.support.llm import ScriptedLLM, ToolCalls

BUSY = ToolCalls([("team_list_tasks", {})])
"""A member turn that keeps the member working (and checking for cancel) without blocking the
scripted server, which answers one request at a time."""


def task_id_of(body: dict[str, Any]) -> str:
    """The task a member request is about (from its dispatch input, whatever turn it is)."""
    for message in body["messages"]:
        found = re.search(r"^Task ID: (\S+)", str(message.get("content") or ""), re.M)
        if found:
            return found.group(1)
    raise AssertionError(f"no Task ID in the request: {body['messages']!r}")


def member_answer(body: dict[str, Any]) -> str:
    """A member's final answer naming its task."""
    return f"output of {task_id_of(body)}"


def script_run(
    llm: ScriptedLLM,
    run_id: str,
    plan: Any,
    *,
    member: Any = member_answer,
    synth: str | None = "final answer",
) -> dict[str, str]:
    """Program planner, member and synthesizer models for one run; returns their names.
    With `synth` None the run must end without synthesis (a call would find no reply)."""
    plan_text = plan if isinstance(plan, str) else json.dumps(plan)
    handler = member if callable(member) else None
    return {
        "planner": llm.script(f"plan-{run_id}", [plan_text]),
        "member": llm.script(f"member-{run_id}", None if handler else member, handler=handler),
        "synth": llm.script(f"synth-{run_id}", [] if synth is None else [synth]),
    }


def busy_until(release: threading.Event, task_id: str) -> Callable[[dict[str, Any]], Any]:
    """A member handler: `task_id` keeps calling tools until `release` is set."""

    def handler(body: dict[str, Any]) -> str | ToolCalls:
        if task_id_of(body) == task_id and not release.is_set():
            return BUSY
        return member_answer(body)

    return handler


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool result messages a model request carries, in order."""
    return [m["content"] for m in body["messages"] if m.get("role") == "tool"]


def parsed(result: str) -> dict[str, Any]:
    """A tool result as JSON (fails on TOOL_ERROR results, which are not JSON)."""
    return json.loads(result)


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the tools a model request offers."""
    return [t["function"]["name"] for t in body.get("tools") or []]


def error_of(result: str) -> dict[str, Any]:
    """A TOOL_ERROR result's JSON payload (fails on any other result)."""
    assert result.startswith("TOOL_ERROR: "), result
    return json.loads(result[len("TOOL_ERROR: ") :])
