"""The one agent loop a run member's attempt, a teammate's turn and the lead all run: prepare a
step, call the model, run the reply's tool calls, until an answer, a stop or the step limit.

Each caller configures the loop with its StepPolicy: what it checks before a call (a claim, a
lease, a budget, a deadline), what a step starts with (an inbox block, a person's line), what it
writes after the reply and after the tools (a checkpoint, a charge), and how tool calls run (a
teammate's are guarded for replay). So a fix to the loop lands in all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from teamctl.shared.agent.model_caller import Message, ModelCaller
from teamctl.shared.agent.replies import ModelReply, ToolCall
from teamctl.shared.agent.tools import Toolbox


@dataclass(frozen=True)
class Stop:
    """A policy ends the loop: before a step's call, or after a step whose tools asked it to."""

    reason: str


class StepPolicy(Protocol):
    """What one kind of agent does around each step of the loop."""

    def prepare(self, step: int, messages: list[Message]) -> list[Message] | Stop:
        """Before step `step`'s model call (from 1): checks that may stop the loop, and the
        messages the step starts with. May drop old messages from `messages` (memory caps)."""
        ...

    def on_reply(self, reply: ModelReply, sent: list[Message]) -> None:
        """After the call, with the step's messages so far (its input and the reply), before
        any tool runs: charge the usage, check the agent still may act, checkpoint."""
        ...

    def run_tools(self, reply: ModelReply) -> list[Message]:
        """The reply's tool calls run, each result a `tool` message."""
        ...

    def end_step(self, reply: ModelReply, sent: list[Message]) -> Stop | None:
        """After the step (its tool results in `sent`, if any): commit, check; a Stop ends the
        loop even though the reply called tools."""
        ...


@dataclass
class LoopEnd:
    """How the loop ended: an answer, a policy's stop, or neither (the step limit)."""

    answer: str | None = None
    """The text of the reply that called no tool."""
    stop: str | None = None
    """The reason a policy gave."""
    reply: ModelReply | None = None
    """The last reply, if any call was made."""


@dataclass
class AgentLoop:
    """Model calls and tool calls, bounded by `max_steps` calls, as `policy` directs."""

    client: ModelCaller
    model: str
    api_base: str | None
    toolbox: Toolbox
    max_steps: int
    policy: StepPolicy

    def run(self, messages: list[Message]) -> LoopEnd:
        """Run steps on `messages` (extended in place: it is the session's transcript)."""
        end = LoopEnd()
        for step in range(1, self.max_steps + 1):
            sent = self.policy.prepare(step, messages)
            if isinstance(sent, Stop):
                end.stop = sent.reason
                return end
            reply = self.client.complete(
                self.model,
                messages + sent,
                tools=self.toolbox.schemas() or None,
                api_base=self.api_base,
            )
            end.reply = reply
            sent.append(assistant_message(reply))
            self.policy.on_reply(reply, sent)
            if reply.tool_calls:
                sent.extend(self.policy.run_tools(reply))
            messages.extend(sent)
            stop = self.policy.end_step(reply, sent)
            if not reply.tool_calls:
                end.answer = reply.content or ""
                return end
            if stop is not None:
                end.stop = stop.reason
                return end
        return end


def assistant_message(reply: ModelReply) -> Message:
    """The reply as a chat message to send back; `tool_calls` only when there are some (an
    empty list is refused by some providers)."""
    message: Message = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return message


def tool_results(toolbox: Toolbox, reply: ModelReply) -> list[Message]:
    """The reply's tool calls run, each result as a `tool` message (errors included)."""
    return [
        tool_message(call, toolbox.call(call.name, call.arguments, call.id))
        for call in reply.tool_calls
    ]


def tool_message(call: ToolCall, content: str) -> Message:
    """One tool call's result as the `tool` message the model gets."""
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
