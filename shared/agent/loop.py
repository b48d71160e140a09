"""The member agent loop: call the model, run its tool calls, stop on a final answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teamctl.shared.agent.llm import ModelClient, ModelReply
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.errors import ModelError
from teamctl.shared.models import Usage


class AttemptAbandoned(Exception):  # noqa: N818  (a signal, not a failure to report)
    """The claim was lost or released: stop without writing anything."""


class HandedOff(Exception):  # noqa: N818  (a signal, not a failure to report)
    """The running task was reassigned: stop this session; the new member takes over."""


@dataclass
class AgentRun:
    """What a member's session produced."""

    output: str
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    transcript: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class AgentLoop:
    """A fresh session per task; bounded by `max_steps` model calls.

    `check_continue` runs before every model call and may stop the session; `check_claim` runs
    after every step's tools, so a handoff or release made on the last step still ends the
    session as that tool asked, instead of as a step-limit failure.
    """

    client: ModelClient
    model: str
    api_base: str | None
    toolbox: Toolbox
    max_steps: int
    check_continue: Callable[[], None]
    check_claim: Callable[[], None]
    on_usage: Callable[[Usage], None]

    def run(self, system_prompt: str, user_prompt: str) -> AgentRun:
        """The session: model turns and tool calls until a final answer or the step limit."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt},
                                          {"role": "user", "content": user_prompt}]
        run = AgentRun(output="", transcript=messages)
        for step in range(1, self.max_steps + 1):
            self.check_continue()
            reply = self._call(messages)
            run.usage = run.usage.plus(reply.usage)
            run.steps = step
            self.on_usage(reply.usage)
            if not reply.tool_calls:
                run.output = reply.content or ""
                return run
            # The claim may have been lost during a long call: a stale attempt runs no tools.
            self.check_continue()
            messages.append(_assistant_message(reply))
            messages.extend(self._run_tools(reply))
            self.check_claim()
        raise ModelError(f"member exceeded {self.max_steps} steps")

    def _call(self, messages: list[dict[str, Any]]) -> ModelReply:
        return self.client.complete(self.model, messages, tools=self.toolbox.schemas() or None,
                                    api_base=self.api_base)

    def _run_tools(self, reply: ModelReply) -> list[dict[str, Any]]:
        return [{"role": "tool", "tool_call_id": call.id, "name": call.name,
                 "content": self.toolbox.call(call.name, call.arguments, call.id)}
                for call in reply.tool_calls]


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    return {"role": "assistant", "content": reply.content,
            "tool_calls": [{"id": c.id, "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments}}
                           for c in reply.tool_calls]}
