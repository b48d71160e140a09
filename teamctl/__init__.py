"""teamctl: a distributed runtime for teams of LLM agents on Redis and RQ.

The public Python API is what `__all__` names; everything else (`teamctl.coordinator`,
`teamctl.worker`, `teamctl.shared`) is internal. The names load on first use, so the workers,
which import `teamctl.worker`, never pay for the API's imports.

    from teamctl import Team, Member
    result = Team.from_file("team.toml").run("Compare Redis streams and Kafka")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Team": "teamctl.api", "Run": "teamctl.api", "attach": "teamctl.api",
    "Member": "teamctl.shared.team", "RunOptions": "teamctl.shared.team",
    "McpServer": "teamctl.shared.team",
    "RunResult": "teamctl.shared.models", "MemberResult": "teamctl.shared.models",
    "TaskStateView": "teamctl.shared.models", "Envelope": "teamctl.shared.models",
    "RunStatus": "teamctl.shared.models", "TaskStatus": "teamctl.shared.models",
    "Usage": "teamctl.shared.models", "RunEvent": "teamctl.shared.models",
    "TaskChange": "teamctl.shared.models", "MessageEvent": "teamctl.shared.models",
    "TeamError": "teamctl.shared.errors", "ConfigError": "teamctl.shared.errors",
    "ModelError": "teamctl.shared.errors", "InfraError": "teamctl.shared.errors",
    "RunFailed": "teamctl.shared.errors",
    "ToolContext": "teamctl.shared.agent.python_tools",
}
__all__ = [
    "ConfigError", "Envelope", "InfraError", "McpServer", "Member", "MemberResult",
    "MessageEvent", "ModelError", "Run", "RunEvent", "RunFailed", "RunOptions", "RunResult",
    "RunStatus", "TaskChange", "TaskStateView", "TaskStatus", "Team", "TeamError",
    "ToolContext", "Usage", "__version__", "attach",
]

if TYPE_CHECKING:
    from teamctl.api import Run, Team, attach
    from teamctl.shared.agent.python_tools import ToolContext
    from teamctl.shared.errors import ConfigError, InfraError, ModelError, RunFailed, TeamError
    from teamctl.shared.models import (
        Envelope,
        MemberResult,
        MessageEvent,
        RunEvent,
        RunResult,
        RunStatus,
        TaskChange,
        TaskStateView,
        TaskStatus,
        Usage,
    )
    from teamctl.shared.team import McpServer, Member, RunOptions


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'teamctl' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
