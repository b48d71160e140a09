"""Errors grouped by whose fault they are, each message saying how to fix it.

    TeamError
    ├── ConfigError        the user's input or configuration (exit 2)
    ├── ModelError         the model misbehaved or its provider failed
    ├── InfraError         Redis, workers or the machine
    └── RunFailed          a run ended without success (exit 1)

ToolFailed is separate: it is turned into a tool result for the model, never raised out of a worker.
"""

from __future__ import annotations


class TeamError(Exception):
    """Base of every error teamctl raises on purpose."""

    exit_code = 1


class ConfigError(TeamError):
    """A usage or configuration mistake; the message says what to change."""

    exit_code = 2


class ModelError(TeamError):
    """A model call failed or returned something unusable."""


class InfraError(TeamError):
    """Redis, RQ or a local process is unavailable or misbehaving."""


class RunFailed(TeamError):
    """A run could not finish (planner error, rejected plan, lease lost)."""


class ToolFailed(Exception):
    """A tool call failed; the message goes back to the model as the tool result."""
