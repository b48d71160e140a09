"""What a person or a program reads of a planned run: the result JSON (`run --json`, `status
--json`, the Python API) and the lines of `events --json`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, TypeAdapter
from teamctl.shared.agent.model_usage import ModelUsage
from teamctl.shared.agent.replies import ModelReply, Usage
from teamctl.shared.envelopes import Envelope
from teamctl.shared.runs.lineage import Lineage
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.task_records import EventKind, Plan, TaskStatus


class SynthesisResult(BaseModel):
    """What `after_synthesis` hooks receive (AI4J's synthesizer AgentResult): the final text
    and the synthesizer's raw response."""

    output: str
    response: ModelReply


class TaskChange(BaseModel):
    """A task's state change as `teamctl tasks --follow --json` and `teamctl events --json` print
    it (one JSON line each); also a task as the board stood when following began."""

    kind: Literal["task"] = "task"
    id: str | None = None
    """The entry of the run's events stream; None for a line of the board as first read."""
    task_id: str
    status: EventKind | TaskStatus
    """What happened (an EventKind); on a line of the board as first read, its TaskStatus."""
    member_id: str | None = None
    """Who held the task at the change, else its planned member."""
    attempts: int = 0
    at_ms: int = 0
    """When it changed (epoch ms; the events entry's time, or the task's updated_ms)."""


class MessageEvent(BaseModel):
    """A bus message as `teamctl events --json` prints it: `kind` and the message itself, the
    Envelope `teamctl messages --json` prints (one definition of a message)."""

    kind: Literal["message"] = "message"
    message: Envelope


RunEvent = Annotated[TaskChange | MessageEvent, Discriminator("kind")]
"""One line of `teamctl events --json`: a task change or a message, told apart by `kind`."""


RUN_EVENTS: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
"""Parses a line of `teamctl events --json` back into its model."""


class MemberResult(BaseModel):
    """What one executed task produced, for the synthesizer and the result JSON."""

    task_id: str
    member_id: str | None
    member_name: str | None
    task: str
    task_status: TaskStatus
    output: str | None
    error: str | None
    duration_ms: int
    attempts: int
    usage: Usage
    model: str | None = None
    """The model that answered the task's last model call."""
    fallback_from: str | None = None
    """The member's own model, when a fallback answered that call."""
    transcript: list[dict[str, Any]] | None = None
    """The member's raw session (messages and tool results) of the attempt that ended the
    task, capped at `transcript_max_chars`; None where none was kept."""


class TaskStateView(BaseModel):
    """The task_states entry of the result JSON."""

    task_id: str
    status: TaskStatus
    claimed_by: str | None
    phase: str
    detail: str | None
    percent: int
    heartbeat_count: int
    attempts: int
    output: str | None
    error: str | None
    duration_ms: int
    model: str | None = None
    """The model that answered the task's last model call."""
    fallback_from: str | None = None
    """The member's own model, when a fallback answered that call."""
    waiting_model: str | None = None
    """The model whose provider limit holds the task's call back now (None: not waiting)."""
    waiting_until_ms: int = 0
    """Until when (epoch ms) it waits, as its caller last knew."""


class RunResult(BaseModel):
    """The result JSON of `teamctl run --json` and `teamctl status --json`."""

    team_id: str
    """The team file's `team_id`."""
    run_id: str
    objective: str
    """What the person asked for."""
    status: RunStatus
    plan: Plan
    """The normalized plan (tasks, the planner's raw text, whether it fell back)."""
    member_results: list[MemberResult]
    """Per executed task, in dispatch order: member, output or error, duration, attempts,
    usage, transcript."""
    task_states: list[TaskStateView]
    """Every task's final state on the board."""
    messages: list[Envelope]
    """The run's bus, in order."""
    rounds: int
    """Dispatch rounds the coordinator ran."""
    output: str | None
    """The synthesized answer; None when the run ended before synthesis."""
    error: str | None = None
    """Why the run ended before its synthesis, or the synthesis failed (the planner's or
    synthesizer's failure, a rejected plan, a timeout, a spent budget, `cancelled`); None once
    it was synthesized (a `failed` status then means some task failed or was blocked)."""
    synthesis: ModelReply | None = None
    """The synthesizer's raw response (text, tool calls, usage); `output` is its text."""
    total_duration_ms: int
    usage: Usage
    """Tokens and cost of every model call of the run (planner, members, synthesizer)."""
    usage_by_model: dict[str, ModelUsage] = Field(default_factory=dict)
    """`usage` per model that answered (a fallback's calls counted as `fallback_calls` too)."""
    lineage: Lineage | None = None
    """The run this one replays or forks (`teamctl replay`, `teamctl fork`)."""
    forks: list[str] = Field(default_factory=list)
    """The runs replayed or forked from this one."""


class DiffRun(BaseModel):
    """One of the two runs `teamctl diff` compares, as it stood when read."""

    run_id: str
    status: RunStatus
    objective: str
    usage: Usage
    """Every model call of the run (planner, members, synthesizer)."""
    lineage: str | None = None
    """`replay of R` or `forked from R at t2`, for a run made from another's records."""
    reused_calls: int = 0
    """Model calls taken from records instead of made: a replay's or fork's, and steps a
    crashed attempt's successor replayed."""

    @property
    def in_progress(self) -> bool:
        return not self.status.finished


class DiffTask(BaseModel):
    """A task as one run of a diff holds it: its plan entry, its status, output and usage."""

    member_id: str | None
    task: str
    depends_on: list[str]
    status: TaskStatus
    output: str | None
    usage: Usage


class TaskDiff(BaseModel):
    """One task id across the two runs: absent from one (added or removed), or in both."""

    task_id: str
    a: DiffTask | None
    """The task in run A; None when only run B has it (added)."""
    b: DiffTask | None
    """The task in run B; None when only run A has it (removed)."""
    changed: list[str] = Field(default_factory=list)
    """The plan fields that differ (`member`, `task`, `depends_on`), for a task in both."""
    same_output: bool | None = None
    """Whether both outputs are the same text; None unless both runs have an output for it."""
    output_diff: list[str] = Field(default_factory=list)
    """The unified diff of A's output to B's, a line each, whole (empty when the same)."""
    tokens_delta: int = 0
    """B's tokens minus A's (a side without the task counts 0)."""
    cost_delta_usd: float = 0.0


class RunDiff(BaseModel):
    """What `teamctl diff RUN_A RUN_B --json` prints: two runs' objectives, plans, outputs and
    usage side by side."""

    a: DiffRun
    b: DiffRun
    same_objective: bool
    tasks: list[TaskDiff]
    """Run A's tasks in its plan order, then those only run B has, in its order."""
    added: list[str]
    """Tasks only run B has."""
    removed: list[str]
    """Tasks only run A has."""
    changed: list[str]
    """Tasks in both whose plan entry (member, task text, dependencies) differs."""
    tokens_delta: int
    """B's total tokens minus A's."""
    cost_delta_usd: float
