"""A planned run's own records: its status, why its coordinator is woken, the decision on its
plan, and a worker's report on the members' Python tools."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class RunStatus(StrEnum):
    """A run's lifecycle: the first five drive it, the last three end it."""

    PLANNING = "planning"
    AWAITING_APPROVAL = "awaiting_approval"
    RUNNING = "running"
    AWAITING_BUDGET = "awaiting_budget"
    """Paused: its budget cannot cover the next model call; `teamctl budget` resumes it."""
    SYNTHESIZING = "synthesizing"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class Wake(StrEnum):
    """Why the coordinator is woken outside a board change (run_signal.lua writes `run.<what>`)."""

    STOP = "stop"
    APPROVAL = "approval"
    BUDGET = "budget"


class Approval(StrEnum):
    """The recorded decision on a plan (require_plan_approval)."""

    APPROVED = "approved"
    REJECTED = "rejected"


class ToolImportReport(BaseModel):
    """What a worker found importing the Python tools of a queue's members before a run plans
    (the tool check job, read back by the coordinator): one line per tool that did not load."""

    worker: str
    failures: list[str] = Field(default_factory=list)
