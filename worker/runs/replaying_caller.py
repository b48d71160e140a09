"""A member's model calls answered from its task's journal first: a reclaimed task's next attempt
replays the steps the dead attempt already paid for, then goes on live from the first step the
journal does not have. A replayed or forked run's task replays what its source recorded the same
way; a replay's (`strict`) never goes on live."""

from __future__ import annotations

from typing import Any

from teamctl.shared.agent.model_caller import Message, ModelCaller
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.errors import ModelError, ReplayDiverged
from teamctl.shared.runs.journal import RecordedStep
from teamctl.shared.runs.lineage import TaskReuse


class ReplayingCaller:
    """Step n's reply is the journal's n-th while it has one; then the live client's (or, for a
    strict replay, the divergence: its source made no such call)."""

    def __init__(
        self,
        live: ModelCaller,
        recorded: list[RecordedStep],
        *,
        task_id: str = "",
        reuse: TaskReuse | None = None,
    ) -> None:
        self.live = live
        self.recorded = recorded
        self.task_id = task_id
        self.reuse = reuse
        """What the task takes from a source run (None: a run of its own)."""
        self.step = 0
        """The step whose reply was given last (from 1)."""

    @property
    def replaying(self) -> bool:
        """Whether the last reply came from the journal (its usage was charged already)."""
        return 0 < self.step <= len(self.recorded)

    @property
    def from_source(self) -> bool:
        """Whether the last reply is one the source run recorded (not one this run's own earlier
        attempt did): its tool calls are never executed."""
        return self.reuse is not None and self.replaying and self.step <= self.reuse.steps

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
        if self.reuse is not None and self.reuse.strict:
            if self.reuse.source_error:  # the source failed here too: the same failure
                raise ModelError(self.reuse.source_error)
            raise self.diverged(
                self.reuse.recorded_end
                or "the current code asks for a model call the recorded run did not make "
                f"(it recorded {len(self.recorded)} step(s))"
            )
        return self.live.complete(model, messages, tools=tools, api_base=api_base)

    def recorded_result(self, call_id: str) -> str | None:
        """The journal's result of this step's tool call `call_id`, if it finished before."""
        return self.recorded[self.step - 1].results.get(call_id) if self.replaying else None

    def diverged(self, why: str) -> ReplayDiverged:
        """The line a replay stops with: where, and why."""
        return ReplayDiverged(f"diverged at task {self.task_id}, step {self.step}: {why}")

    def replayed_step(self) -> RecordedStep | None:
        """The journal's record of the step being replayed (its started calls, its results),
        or None once the steps are live."""
        return self.recorded[self.step - 1] if self.replaying else None
