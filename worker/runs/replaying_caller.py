"""A member's model calls answered from its task's journal first: a reclaimed task's next attempt
replays the steps the dead attempt already paid for, then goes on live from the first step the
journal does not have."""

from __future__ import annotations

from typing import Any

from teamctl.shared.agent.model_caller import Message, ModelCaller
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.runs.journal import RecordedStep


class ReplayingCaller:
    """Step n's reply is the journal's n-th while it has one; then the live client's."""

    def __init__(self, live: ModelCaller, recorded: list[RecordedStep]) -> None:
        self.live = live
        self.recorded = recorded
        self.step = 0
        """The step whose reply was given last (from 1)."""

    @property
    def replaying(self) -> bool:
        """Whether the last reply came from the journal (its usage was charged already)."""
        return 0 < self.step <= len(self.recorded)

    def complete(
        self,
        model: str,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        api_base: str | None = None,
    ) -> ModelReply:
        self.step += 1
        if self.replaying:
            return self.recorded[self.step - 1].reply
        return self.live.complete(model, messages, tools=tools, api_base=api_base)

    def recorded_result(self, call_id: str) -> str | None:
        """The journal's result of this step's tool call `call_id`, if it finished before."""
        return self.recorded[self.step - 1].results.get(call_id) if self.replaying else None
