"""Errors grouped by whose fault they are, each message saying how to fix it.

    TeamError
    ├── ConfigError        the user's input or configuration (exit 2)
    ├── ModelError         the model misbehaved or its provider failed
    │   ├── CredentialsError   the provider's credentials are missing or were rejected
    │   └── ModelUnavailable   this model cannot answer now: a fallback model may
    ├── InfraError         Redis, workers or the machine
    │   └── UnreadableRecord   a record in Redis does not parse (one run, not all)
    ├── RunFailed          a run ended without success (exit 1)
    │   ├── BudgetSpent    the budget cannot cover the next call: the run or team pauses
    │   ├── Interrupted    the process driving it was asked to stop (Ctrl-C, a timeout)
    │   └── ReplayDiverged a replay's current code took a path its recorded run did not
    └── NothingToShow      a command that only reads found no embedded Redis running (exit 0)

ToolFailed is separate: it is turned into a tool result for the model, never raised out of a worker.
"""

from __future__ import annotations

from pydantic import ValidationError
from teamctl.shared.text import shorten

REASON_CHARS = 200


class TeamError(Exception):
    """Base of every error teamctl raises on purpose."""

    exit_code = 1


class ConfigError(TeamError):
    """A usage or configuration mistake; the message says what to change."""

    exit_code = 2


class ModelError(TeamError):
    """A model call failed or returned something unusable."""


class CredentialsError(ModelError):
    """A provider's credentials are missing or were rejected: only a changed environment fixes
    it, so it is never retried; the message names the variable to set."""


class ModelUnavailable(ModelError):
    """A model that cannot answer now, for a reason a fallback model may not share: its
    retries were spent on 429s, 5xx or timeouts, the request exceeds its context window, its
    provider refused the content, or its account is paused past the caller's wait limit."""

    def __init__(self, message: str, *, model: str, reason: str) -> None:
        super().__init__(message)
        self.model = model
        self.reason = reason
        """One of UNAVAILABLE_REASONS."""


UNAVAILABLE_REASONS = ("retries_spent", "context_window", "content_policy", "paused")
"""Why a model was unavailable (ModelUnavailable.reason)."""


class InfraError(TeamError):
    """Redis, RQ or a local process is unavailable or misbehaving."""


class UnreadableRecord(InfraError):
    """A record in Redis that does not parse (edited by hand, or written by another version):
    readers report the one run it belongs to and go on with the others."""


def unreadable(what: str, exc: Exception) -> UnreadableRecord:
    """UnreadableRecord saying, in one line, which record did not parse and why."""
    if isinstance(exc, KeyError):
        reason = f"missing field {exc.args[0]!r}"
    elif isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        if where and isinstance(first["input"], str | int | float):  # show the stored value
            where = f"{where}={shorten(repr(first['input']), REASON_CHARS // 4)}"
        reason = f"{where}: {first['msg']}" if where else first["msg"]
    else:
        reason = str(exc) or type(exc).__name__
    return UnreadableRecord(
        f"{what} in Redis does not parse ({shorten(' '.join(reason.split()), REASON_CHARS)})"
    )


class RunFailed(TeamError):
    """A run could not finish (planner error, rejected plan, lease lost)."""


class BudgetSpent(RunFailed):
    """The budget of a run or team cannot cover the next model call (its worst case was not
    reserved): the call is not made, and the run or team pauses until the budget is raised."""


class ReplayDiverged(RunFailed):
    """A replayed run asked for what its recorded run never did (a model call past the recorded
    steps, a tool that is gone, another plan): it stops there, since a replay pays for nothing."""


class Interrupted(RunFailed):
    """The process driving a run (or a team) was asked to stop: Ctrl-C, or the Python API's
    timeout. The run is left as it was, for the caller to cancel."""


class NothingToShow(TeamError):
    """Not a failure: a command that only reads found no embedded Redis running, says so on
    stderr and exits 0, having started nothing."""

    exit_code = 0


class ToolFailed(Exception):
    """A tool call failed; the message goes back to the model as the tool result."""


class ToolTimeout(ToolFailed):
    """A tool call ran past its time limit and was abandoned; the model hears so."""
