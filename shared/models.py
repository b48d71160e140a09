"""Records that cross a process boundary: plans, task states, messages, usage and results."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


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


class TaskState(BaseModel):
    """A task as stored on the board (one Redis hash)."""

    task_id: str
    member_id: str | None = None
    task: str = ""
    context: str | None = None
    depends_on: list[str] = Field(default_factory=list)
    dependents: list[str] = Field(default_factory=list)
    """Tasks that list this one in depends_on (the board's dependents index)."""
    status: TaskStatus = TaskStatus.PENDING
    claimed_by: str | None = None
    worker: str | None = None
    phase: str = "planned"
    detail: str | None = None
    percent: int = 0
    heartbeat_count: int = 0
    attempts: int = 0
    token: int = 0
    stale_writes: int = 0
    start_ms: int = 0
    end_ms: int = 0
    updated_ms: int = 0
    last_heartbeat_ms: int = 0
    duration_ms: int = 0
    output: str | None = None
    error: str | None = None
    requeue_reason: str | None = None
    """Why the last claim ended without a result (release reason or "claim expired"); AI4J's
    refresh overwrites this in detail/error, so it is kept here."""
    usage: Usage = Field(default_factory=Usage)

    @property
    def terminal(self) -> bool:
        return self.status.terminal


class TaskEvent(BaseModel):
    """One entry of a run's events stream (written by the board scripts, and by RunStore.wake
    with an empty task_id to wake the coordinator)."""

    id: str
    task_id: str = ""
    status: str
    """A TaskStatus value, or created/reclaimed/released/reassigned, or run.<wake-up>."""
    token: str = "0"


class Envelope(BaseModel):
    """One message on the run's bus."""

    model_config = ConfigDict(populate_by_name=True)

    id: str = ""
    from_: str = Field(alias="from")
    to: str | None = None
    type: str
    task_id: str | None = None
    content: str = ""
    created_at: int = 0


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
    total_duration_ms: int
    usage: Usage
