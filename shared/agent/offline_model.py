"""The built-in offline model: a deterministic litellm custom provider, so no network is needed.

It reads the same prompts a real model gets and answers by role: a planner prompt gets one task per
member (the last one depending on the others), a member a short note naming its task, a synthesis
prompt the member outputs joined, a persistent teammate or the lead a short acknowledgement.
Given tools, `teamctl-offline/default` first uses them the way a team would (offline_actions.py:
messages, tasks, plans, shutdowns, spawns, each Python and MCP tool once); `teamctl-offline/plain`
never calls a tool, for benchmarks and tests that time or count the rest.
"""

from __future__ import annotations

import json
import re
from typing import Any

from teamctl.shared.agent.offline_actions import (
    Act,
    Conversation,
    lead_act,
    member_act,
    teammate_act,
    text_of,
    tool_calls,
)

PROVIDER = "teamctl-offline"
MODEL = f"{PROVIDER}/default"
PLAIN = "plain"
PLAIN_MODEL = f"{PROVIDER}/{PLAIN}"
"""The offline model that answers in text only (no tool calls)."""

_MEMBER_LINE = re.compile(r"^- id=([^,\s]+)(?:, name=([^,]*))?(?:, expertise=(.*))?$", re.M)
_SECTION = r"^{title}:\n(.*?)(?:\n\n|\Z)"
_INBOX_ID = '"id": '
TEAMMATE_MARK = "You are a persistent teammate"
"""Starts a teammate turn's system prompt (worker/teams/turn.py)."""
PLACEHOLDER_NOTE = (
    "(Written by teamctl's built-in offline demo model, which only shows the "
    "run's shape: set a provider key or --model for a real answer.)"
)
"""Ends every synthesized answer, so nobody takes the demo's for a real one."""
LEAD_MARK = "You are the lead agent of a persistent team"
"""Starts the lead agent's system prompt (coordinator/teams/prompts/lead_system.md)."""


def answer(prompt: str) -> str:
    """The offline model's reply to a prompt, by the role the prompt asks for."""
    if prompt.startswith(LEAD_MARK):  # its memory may quote any prompt: only its start counts
        return _lead(prompt)
    if TEAMMATE_MARK in prompt:
        return _teammate(prompt)
    if "You are a team planner." in prompt:
        return _plan(prompt)
    if "You are the team lead." in prompt:
        return _synthesize(prompt)
    return _member(prompt)


def _section(prompt: str, title: str) -> str:
    match = re.search(_SECTION.format(title=re.escape(title)), prompt, re.S | re.M)
    return match.group(1).strip() if match else ""


def _plan(prompt: str) -> str:
    objective = _section(prompt, "Objective")
    members = _MEMBER_LINE.findall(prompt)
    tasks: list[dict[str, Any]] = []
    for index, (member_id, _name, expertise) in enumerate(members, start=1):
        focus = expertise.strip() or "the objective"
        earlier = [t["id"] for t in tasks] if index == len(members) and index > 1 else []
        tasks.append(
            {
                "id": f"{member_id}_part",
                "memberId": member_id,
                "task": f"Cover {focus} for: {objective}",
                "dependsOn": earlier,
            }
        )
    return json.dumps({"tasks": tasks})


def _member(prompt: str) -> str:
    task_id = re.search(r"^Task ID: (.*)$", prompt, re.M)
    role = re.search(r"^Team member role: (.*)$", prompt, re.M)
    task = _section(prompt, "Assigned task").splitlines()
    summary = task[0][:160] if task else "the task"
    return (
        f"[{role.group(1) if role else 'member'}] {task_id.group(1) if task_id else 'task'}: "
        f"notes on {summary!r} (offline demo model)."
    )


def _teammate_header(prompt: str) -> str:
    name = re.search(r"^Name: (.*)$", prompt, re.M)
    role = re.search(r"^Role: (.*)$", prompt, re.M)
    return f"[{role.group(1) if role else 'teammate'}] {name.group(1) if name else 'teammate'}"


def _teammate(prompt: str) -> str:
    """A persistent teammate's final answer of a turn: a short acknowledgement."""
    return f"{_teammate_header(prompt)}: noted ({prompt.count(_INBOX_ID)} inbox messages seen)."


def _lead_header(prompt: str) -> str:
    team = re.search(r"^Team: (.*)$", prompt, re.M)
    return f"[lead of {team.group(1) if team else 'the team'}]"


def _lead(prompt: str) -> str:
    """The lead's final answer when it did nothing: a short acknowledgement of the last request."""
    # The last line a person wrote (inbox blocks are tags and JSON lines).
    said = [
        line for line in prompt.splitlines() if line.strip() and not line.startswith(("<", "{"))
    ]
    summary = said[-1][:120] if said else "the inbox"
    seen = prompt.count(_INBOX_ID)
    return f"{_lead_header(prompt)} noted {summary!r} ({seen} inbox messages seen)."


def _synthesize(prompt: str) -> str:
    outputs = re.findall(r"^  output: (.*)$", prompt, re.M)
    objective = _section(prompt, "Objective")
    body = "\n".join(f"- {line}" for line in outputs) or "- (no member output)"
    return f"Answer to: {objective}\n{body}\n\n{PLACEHOLDER_NOTE}"


def act(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Act:
    """The offline model's reply to a conversation: tool calls, or its final answer."""
    prompt = _prompt(messages, ("user", "system"))
    text = answer(prompt)
    if model == PLAIN or not tools:
        return Act(text=text)
    conv = Conversation(messages, tools)
    if prompt.startswith(LEAD_MARK):
        return lead_act(conv, _lead_header(prompt), text)
    if TEAMMATE_MARK in prompt:
        return teammate_act(conv, _teammate_header(prompt), text)
    task_id = re.search(r"^Task ID: (.*)$", prompt, re.M)
    return member_act(conv, task_id.group(1), text) if task_id else Act(text=text)


def _prompt(messages: list[dict[str, Any]], roles: tuple[str, ...]) -> str:
    return "\n".join(text_of(m) for m in messages if m.get("role") in roles)


def make_provider() -> Any:
    """Build the litellm CustomLLM handler (litellm is imported by the caller, lazily)."""
    import litellm
    from litellm.llms.custom_llm import CustomLLM

    class OfflineModel(CustomLLM):
        def completion(self, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
            messages = list(kwargs.get("messages") or [])
            tools = list((kwargs.get("optional_params") or {}).get("tools") or [])
            reply = act(str(kwargs.get("model") or ""), messages, tools)
            message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
            if reply.calls:
                message["tool_calls"] = list(tool_calls(reply, messages))
            prompt_tokens = max(1, len(_prompt(messages, ("user", "system", "tool"))) // 4)
            completion_tokens = max(1, len(reply.text or json.dumps(message)) // 4)
            return litellm.ModelResponse(
                model=f"{PROVIDER}/{kwargs.get('model') or 'default'}",
                choices=[
                    {
                        "index": 0,
                        "finish_reason": "tool_calls" if reply.calls else "stop",
                        "message": message,
                    }
                ],
                usage={
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            )

    return OfflineModel()
