"""How one attempt ended: a kind of end and its detail, said as one line of the job's result."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class AttemptEnd(Enum):
    """The ways an attempt ends; the value starts the line the job's result says."""

    COMPLETED = "completed"
    FAILED = "failed"
    STALE = "stale"
    """The outcome write was refused: the claim had been reclaimed, nothing was written."""
    ABANDONED = "abandoned"
    """The claim was lost or released, or Redis went away: the attempt stopped unwritten."""
    AWAITING_BUDGET = "awaiting budget"
    HANDED_OFF = "handed off"
    SKIPPED = "skipped"
    """The task or its member vanished before the session started."""


SPAN_ERRORS = {
    AttemptEnd.FAILED: "TaskFailed",
    AttemptEnd.ABANDONED: "AttemptAbandoned",
    AttemptEnd.STALE: "StaleWrite",
}
"""The ends that mark the attempt's span failed, and the error type each records there."""


@dataclass(frozen=True)
class AttemptOutcome:
    """An attempt's end and what it says about it (None when the end says it all)."""

    end: AttemptEnd
    detail: str | None = None

    @property
    def span_error(self) -> str | None:
        """The error type the attempt's span records, when this end is a failure."""
        return SPAN_ERRORS.get(self.end)

    @property
    def span_outcome(self) -> str:
        """The span's `teamctl.outcome`: the end, or for a handoff the whole line, which
        names the member that takes over."""
        return self.text() if self.end is AttemptEnd.HANDED_OFF else self.end.value

    def text(self) -> str:
        """The line the job's result says for this attempt (`abandoned: claim released`)."""
        if self.end is AttemptEnd.HANDED_OFF:
            return f"handed off to {self.detail}"
        return self.end.value if self.detail is None else f"{self.end.value}: {self.detail}"
