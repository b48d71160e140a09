"""A task board's records, a planned run's and a persistent team's alike: task states and the
events the board scripts write, and the plan a board is made from."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, Field
from teamctl.shared.agent.replies import Usage
from teamctl.shared.redis.hash_fields import HashCsv, HashInt, HashText


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

    def shown(self, plan_awaits_approval: bool) -> str:
        """The status as people read it: while the plan awaits approval nothing is dispatched,
        so a ready or pending task is only `planned`."""
        if plan_awaits_approval and self in (TaskStatus.READY, TaskStatus.PENDING):
            return PLANNED
        return self.value


PLANNED = "planned"
"""What `status`, `tasks` and the dashboard call a task of a plan awaiting approval."""


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
    RUN_BUDGET = "run.budget"
    """A wake-up (no task id): the budget was raised (`run.` + Wake.BUDGET)."""
    RUN_END = "run.end"
    """A wake-up (no task id): the run ended (run_finish.lua), for whoever waits for it."""


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
    fallback_reason: str | None = None
    """Why the planner's reply was not a plan, in a few words, when the run fell back."""

    def fallback_line(self) -> str | None:
        """The one line that says the run fell back to one task per member, and why; None
        for a plan the planner made."""
        if not self.fallback:
            return None
        why = f" ({self.fallback_reason})" if self.fallback_reason else ""
        return f"the planner's reply was not a plan{why}; fell back to one task per member"


USAGE_FIELD_PREFIX = "usage_"
"""A task hash keeps its Usage as usage_prompt_tokens, usage_cost_usd, ... (budget_charge.lua)."""


def waiting_text(model: str | None, until_ms: int, now_ms: int, status: TaskStatus) -> str:
    """What a task's call waits for, with the time left: "waiting for MODEL: 3.2 s" ("" when
    it waits for nothing, or the task has ended)."""
    if not model or status.terminal:
        return ""
    return f"waiting for {model}: {max(0, until_ms - now_ms) / 1000:.1f} s"


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
    token: str = "0"
    """The live claim's fencing token (N@EPOCH), "0" when none."""
    stale_writes: HashInt = 0
    replayed_steps: HashInt = 0
    """Steps (model replies and their tool results) the latest attempt took from the task's
    journal instead of making them again (a kept task of a fork: the steps its source made)."""
    journal_cut: bool = False
    """An entry did not fit journal_max_bytes: the journal holds a prefix of the session (a fork
    pays for the rest again)."""
    start_ms: HashInt = 0
    end_ms: HashInt = 0
    updated_ms: HashInt = 0
    last_heartbeat_ms: HashInt = 0
    duration_ms: HashInt = 0
    output: HashText = None
    error: HashText = None
    requeue_reason: HashText = None
    """Why the last claim ended without a result, for a person ("claim expired", or who released
    it, quoting the member's reason); AI4J's refresh overwrites this in detail/error, so it is
    kept here. Never acted on: it may quote a model."""
    reclaimed: bool = False
    """The last claim was taken back before its attempt could end it: its attempt died (its
    heartbeat expired: reclaim.lua) or the budget could not cover its next call
    (release_budget.lua); cleared by any other requeue. The next attempt replays the journal."""
    usage: Usage = Field(default_factory=Usage)
    model: HashText = None
    """The model that answered the task's last model call (shared/agent/fallbacks.py)."""
    fallback_from: HashText = None
    """The member's own model when a fallback answered that call; None when it answered."""
    waiting_model: HashText = None
    """The model whose provider slot or pause the attempt's call waits for (none: not waiting),
    written by the attempt itself, fenced by its claim."""
    waiting_until_ms: HashInt = 0
    waiting_since_ms: HashInt = 0

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    def waiting_text(self, now_ms: int) -> str:
        """ "waiting for openai/gpt-4o-mini: 3.2 s" (the time left), or "" when not waiting."""
        return waiting_text(self.waiting_model, self.waiting_until_ms, now_ms, self.status)

    @classmethod
    def from_hash(cls, fields: dict[str, str]) -> Self:
        """A task hash as a TaskState (its usage_* fields as `usage`); ValidationError if a field
        does not parse."""
        usage = {
            name.removeprefix(USAGE_FIELD_PREFIX): value
            for name, value in fields.items()
            if name.startswith(USAGE_FIELD_PREFIX)
        }
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
    worker: HashText = None
    """The worker process (host:pid) holding the claim as of this change: on `in_progress`, the
    one that claimed it; None when nobody holds it (after a release or reclaim) or a teammate's
    turn does."""


# --- the bus ------------------------------------------------------------------------------------
