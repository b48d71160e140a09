"""The member agent loop: call the model, run its tool calls, stop on a final answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teamctl.shared.agent.llm import ModelClient
from teamctl.shared.agent.replies import ModelReply, Usage
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.errors import ModelError


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
    transcript: list[dict[str, Any]] = field(default_factory=list)
    """The session's messages so far, kept when it ends in an error too."""

    def run(self, system_prompt: str, user_prompt: str) -> AgentRun:
        """The session: model turns and tool calls until a final answer or the step limit."""
        messages: list[dict[str, Any]] = [{"role": "system", "content": system_prompt},
                                          {"role": "user", "content": user_prompt}]
        self.transcript = messages
        run = AgentRun(output="", transcript=messages)
        for step in range(1, self.max_steps + 1):
            self.check_continue()
            reply = self._call(messages)
            run.usage = run.usage.plus(reply.usage)
            run.steps = step
            self.on_usage(reply.usage)
            if not reply.tool_calls:
                run.output = reply.content or ""
                messages.append(assistant_message(reply))  # the transcript ends with the answer
                return run
            # The claim may have been lost during a long call: a stale attempt runs no tools.
            self.check_continue()
            messages.append(assistant_message(reply))
            messages.extend(tool_results(self.toolbox, reply))
            self.check_claim()
        raise ModelError(f"member exceeded {self.max_steps} steps")

    def _call(self, messages: list[dict[str, Any]]) -> ModelReply:
        return self.client.complete(self.model, messages, tools=self.toolbox.schemas() or None,
                                    api_base=self.api_base)


def assistant_message(reply: ModelReply) -> dict[str, Any]:
    """The reply as a chat message to send back; `tool_calls` only when there are some (an
    empty list is refused by some providers)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in reply.tool_calls]
    return message


def tool_results(toolbox: Toolbox, reply: ModelReply) -> list[dict[str, Any]]:
    """The reply's tool calls run, each result as a `tool` message (errors included)."""
    return [{"role": "tool", "tool_call_id": call.id, "name": call.name,
             "content": toolbox.call(call.name, call.arguments, call.id)}
            for call in reply.tool_calls]
