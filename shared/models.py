"""Records that cross a process boundary: plans, task states, messages, usage and results.

Redis hashes and stream entries hold flat strings with '' for an absent value; the Hash* field
types below read them, so every record in Redis is parsed by its model, never by hand.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag, TypeAdapter


def _none_if_blank(value: Any) -> Any:
    return None if value == "" else value


def _zero_if_blank(value: Any) -> Any:
    return 0 if value == "" else value


def _split_csv(value: Any) -> Any:
    return [item for item in value.split(",") if item] if isinstance(value, str) else value


BLANK_IS_NONE = BeforeValidator(_none_if_blank)
"""For an optional field of any type read from Redis: '' means absent."""
HashText = Annotated[str | None, BLANK_IS_NONE]
"""Optional text ('' in Redis: absent)."""
HashInt = Annotated[int, BeforeValidator(_zero_if_blank)]
"""A count or a time in milliseconds ('' in Redis: 0)."""
HashCsv = Annotated[list[str], BeforeValidator(_split_csv)]
"""Ids stored as comma-separated text."""


class TaskStatus(StrEnum):
    """A task's lifecycle state on the board."""

    PENDING = "pending"
    READY = "ready"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"

    @property
    def terminal(self) -> bool:
        return self in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.BLOCKED)


class RunStatus(StrEnum):
    """A run's lifecycle: the first four drive it, the last three end it."""

    PLANNING = "planning"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    SYNTHESIZING = "synthesizing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class EventKind(StrEnum):
    """What an entry of a run's events stream says happened (the board scripts write them)."""

    CREATED = "created"
    """The plan was written to the board (no task id), or a team task was added (its id)."""
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    BLOCKED = "blocked"
    RELEASED = "released"
    RECLAIMED = "reclaimed"
    REASSIGNED = "reassigned"
    RUN_STOP = "run.stop"
    """A wake-up (no task id): somebody asked the run to stop (`run.` + Wake.STOP)."""
    RUN_APPROVAL = "run.approval"
    """A wake-up (no task id): the plan was approved or rejected (`run.` + Wake.APPROVAL)."""
    RUN_END = "run.end"
    """A wake-up (no task id): the run ended (run_finish.lua), for whoever waits for it."""


class Wake(StrEnum):
    """Why the coordinator is woken outside a board change (run_signal.lua writes `run.<what>`)."""

    STOP = "stop"
    APPROVAL = "approval"


class Approval(StrEnum):
    """The recorded decision on a plan (require_plan_approval)."""

    APPROVED = "approved"
    REJECTED = "rejected"


class TaskSpec(BaseModel):
    """One normalized plan task."""

    id: str
    member_id: str | None = None
    task: str = ""
    context: str | None = None
    depends_on: list[str] = Field(default_factory=list)


class Plan(BaseModel):
    """The normalized plan with the planner's raw text."""

    tasks: list[TaskSpec] = Field(default_factory=list)
    raw_plan_text: str = ""
    fallback: bool = False


class Usage(BaseModel):
    """Token and cost totals; `unpriced` when some call had no known price."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    unpriced: bool = False

    def plus(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            unpriced=self.unpriced or other.unpriced,
        )


class ToolCall(BaseModel):
    """One tool call the model asked for; `arguments` is the raw JSON text."""

    id: str
    name: str
    arguments: str = ""


class ModelReply(BaseModel):
    """A model turn: text and/or tool calls, with what it cost."""

    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class SynthesisResult(BaseModel):
    """What `after_synthesis` hooks receive (AI4J's synthesizer AgentResult): the final text
    and the synthesizer's raw response."""

    output: str
    response: ModelReply


USAGE_FIELD_PREFIX = "usage_"
"""A task hash keeps its Usage as usage_prompt_tokens, usage_cost_usd, ... (budget_charge.lua)."""


class TaskState(BaseModel):
    """A task as stored on the board (one Redis hash)."""

    task_id: str
    member_id: HashText = None
    task: str = ""
    context: HashText = None
    depends_on: HashCsv = Field(default_factory=list)
    dependents: HashCsv = Field(default_factory=list)
    """Tasks that list this one in depends_on (the board's dependents index)."""
    status: TaskStatus = TaskStatus.PENDING
    claimed_by: HashText = None
    worker: HashText = None
    phase: str = "planned"
    detail: HashText = None
    percent: HashInt = 0
    heartbeat_count: HashInt = 0
    attempts: HashInt = 0
    token: HashInt = 0
    stale_writes: HashInt = 0
    start_ms: HashInt = 0
    end_ms: HashInt = 0
    updated_ms: HashInt = 0
    last_heartbeat_ms: HashInt = 0
    duration_ms: HashInt = 0
    output: HashText = None
    error: HashText = None
    requeue_reason: HashText = None
    """Why the last claim ended without a result (release reason or "claim expired"); AI4J's
    refresh overwrites this in detail/error, so it is kept here."""
    usage: Usage = Field(default_factory=Usage)

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> Self:
        """A task hash as a TaskState (its usage_* fields as `usage`); ValidationError if a field
        does not parse."""
        usage = {name.removeprefix(USAGE_FIELD_PREFIX): value for name, value in fields.items()
                 if name.startswith(USAGE_FIELD_PREFIX)}
        return cls.model_validate({**fields, "usage": usage})


class TaskEvent(BaseModel):
    """One entry of a run's events stream (written by the board scripts, and by RunStore.wake
    with an empty task_id to wake the coordinator)."""

    id: str
    task_id: str = ""
    status: EventKind
    token: str = "0"
    member_id: HashText = None
    """Who held the task at this change, else its planned member (absent on run.* wake-ups)."""
    attempts: HashInt = 0
    """The task's claims so far, as of this change."""


# --- the bus ------------------------------------------------------------------------------------


class SystemType(StrEnum):
    """Message types only the runtime publishes; a member is refused them (and every other type
    in their namespaces, SYSTEM_NAMESPACES)."""

    TASK_ASSIGNED = "task.assigned"
    """From `system` to the member given a task (a team's: wake_for_tasks.lua, turn_end.lua)."""
    TASK_RESULT = "task.result"
    """From the member to lead, written with the outcome by complete.lua (a team's:
    team_task_complete.lua)."""
    TASK_REMINDER = "task.reminder"
    """From `system` to a teammate ending its turn while it holds a team task (turn_end.lua):
    its one reminder before the task goes back to the board."""
    TASK_RELEASED = "task.released"
    """From `system` to lead: a teammate ended two turns holding a team task, which went back
    to the board (turn_end.lua); the lead may reassign it."""
    TASK_FAILED = "task.failed"
    """From `system` to lead: a team task went back to the board max_task_releases times and
    its holder gave it up once more, so it failed (turn_end.lua); sent once."""
    TASK_ERROR = "task.error"
    """From the member to lead, written with the outcome by fail.lua and reclaim.lua."""
    RUN_COMPLETE = "run.complete"
    """The run's end notices (run_finish.lua), see `ending`."""
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"
    RUN_WARNING = "run.warning"
    RUN_BUDGET_EXCEEDED = "run.budget_exceeded"
    PLAN_APPROVED = "plan.approved"
    PLAN_REJECTED = "plan.rejected"
    HOOK_ERROR = "hook.error"
    INBOX_SUMMARY = "inbox.summary"
    """To a team's lead from `system`: the oldest unread notices past lead_inbox_max_messages,
    folded into one (counts by type, the teammates and tasks named; lead_inbox_fold.lua)."""
    TEAMMATE_IDLE = "teammate.idle"
    """To lead from `system`: a teammate ended its turn and went idle (turn_end.lua)."""
    TEAMMATE_ERROR = "teammate.error"
    """To lead from `system`: a teammate's turn kept failing and it was set idle."""
    TEAMMATE_SHUTDOWN = "teammate.shutdown"
    """To lead from `system`: a teammate was shut down."""
    TEAM_BUDGET_EXCEEDED = "team.budget_exceeded"
    """To lead from `system`: the model call that spent the team's budget was charged
    (TeamStore.charge); sent once."""

    @classmethod
    def ending(cls, status: RunStatus) -> SystemType:
        """The notice announcing that a run ended with `status`."""
        return {RunStatus.COMPLETED: cls.RUN_COMPLETE, RunStatus.FAILED: cls.RUN_FAILED,
                RunStatus.CANCELLED: cls.RUN_CANCELLED}[status]


SYSTEM_NAMESPACES = tuple(dict.fromkeys(t.value.partition(".")[0] + "." for t in SystemType))
"""The prefixes of the system types ("task.", "run.", ...): reserved for the runtime as a whole,
so a member cannot pose as a notice of a later version either."""


class PeerType(StrEnum):
    """The default types of the messages members send; they may name others (e.g. peer.ask)."""

    MESSAGE = "peer.message"
    BROADCAST = "peer.broadcast"


class ProtocolType(StrEnum):
    """The teammates' protocol messages: each carries a request_id (its durable record) and a
    response carries `approve`; only the protocol paths publish them, never send_message."""

    SHUTDOWN_REQUEST = "shutdown_request"
    """From lead to a teammate (request_open.lua)."""
    SHUTDOWN_RESPONSE = "shutdown_response"
    """From the teammate to lead (request_resolve.lua)."""
    PLAN_APPROVAL_REQUEST = "plan_approval_request"
    """From a teammate in plan mode to lead (plan_submit.lua)."""
    PLAN_APPROVAL_RESPONSE = "plan_approval_response"
    """From lead to the teammate (request_resolve.lua)."""


class EnvelopeKind(StrEnum):
    """The variants of Envelope, told apart by the message type (`envelope_kind`)."""

    SYSTEM = "system"
    PEER = "peer"
    PROTOCOL = "protocol"


class EnvelopeBase(BaseModel):
    """The fields every message on a bus has (stream entries store None as ''); dumped as
    `from`, the name the CLI's JSON and the stream use, and read under either name."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: str = ""
    from_: str = Field(alias="from")
    to: HashText = None
    type: str
    task_id: HashText = None
    content: str = ""
    created_at: int = 0


class SystemNotice(EnvelopeBase):
    """A notice the runtime published (from `system`, or from a member announcing its result)."""

    type: SystemType


class PeerMessage(EnvelopeBase):
    """A message a member (or the lead) sent: peer.message, peer.broadcast or its own type."""


class ProtocolMessage(EnvelopeBase):
    """A protocol request or response between the lead and a teammate, tied to its record."""

    type: ProtocolType
    request_id: str
    approve: Annotated[bool | None, BLANK_IS_NONE] = None
    """On a response: whether the request was approved (None on a request)."""


_KIND_OF_TYPE: dict[str, EnvelopeKind] = {**dict.fromkeys(SystemType, EnvelopeKind.SYSTEM),
                                          **dict.fromkeys(ProtocolType, EnvelopeKind.PROTOCOL)}
"""Types with a variant of their own; every other type is a peer message."""


def envelope_kind(message: Any) -> str:
    """The Envelope variant of a message (a dict from a stream, or a model)."""
    type_ = message.get("type") if isinstance(message, dict) else getattr(message, "type", None)
    if not isinstance(type_, str):
        return EnvelopeKind.PEER  # whose validation then says what is wrong with the type
    return _KIND_OF_TYPE.get(type_, EnvelopeKind.PEER)


Envelope = Annotated[
    Annotated[SystemNotice, Tag(EnvelopeKind.SYSTEM)]
    | Annotated[PeerMessage, Tag(EnvelopeKind.PEER)]
    | Annotated[ProtocolMessage, Tag(EnvelopeKind.PROTOCOL)],
    Discriminator(envelope_kind)]
"""One message on a bus: a union discriminated on `type`; parse with ENVELOPES."""

ENVELOPES: TypeAdapter[Envelope] = TypeAdapter(Envelope)
"""Parses and validates messages (stream entries, dicts) into the right Envelope variant."""


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
    transcript: list[dict[str, Any]] | None = None
    """The member's raw session (messages and tool results) of the attempt that ended the
    task, capped at `transcript_max_chars`; None where none was kept."""


class ToolImportReport(BaseModel):
    """What a worker found importing the Python tools of a queue's members before a run plans
    (the tool check job, read back by the coordinator): one line per tool that did not load."""

    worker: str
    failures: list[str] = Field(default_factory=list)


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


class RunResult(BaseModel):
    """The result JSON of `teamctl run --json` and `teamctl status --json` (DESIGN §7)."""

    team_id: str
    run_id: str
    objective: str
    status: RunStatus
    plan: Plan
    member_results: list[MemberResult]
    task_states: list[TaskStateView]
    messages: list[Envelope]
    rounds: int
    output: str | None
    error: str | None = None
    """Why the run ended before its synthesis, or the synthesis failed (the planner's or
    synthesizer's failure, a rejected plan, a timeout, a spent budget, `cancelled`); None once
    it was synthesized (a `failed` status then means some task failed or was blocked)."""
    synthesis: ModelReply | None = None
    """The synthesizer's raw response (text, tool calls, usage); `output` is its text."""
    total_duration_ms: int
    usage: Usage
