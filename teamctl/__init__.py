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
    "Team": "teamctl.api",
    "Run": "teamctl.api",
    "attach": "teamctl.api",
    "TeamHook": "teamctl.coordinator.runs.hooks",
    "Member": "teamctl.shared.team_file",
    "RunOptions": "teamctl.shared.runs.options",
    "McpServer": "teamctl.shared.agent.mcp_config",
    "RunResult": "teamctl.shared.runs.output",
    "MemberResult": "teamctl.shared.runs.output",
    "TaskStateView": "teamctl.shared.runs.output",
    "Plan": "teamctl.shared.task_records",
    "TaskSpec": "teamctl.shared.task_records",
    "ModelReply": "teamctl.shared.agent.replies",
    "ToolCall": "teamctl.shared.agent.replies",
    "SynthesisResult": "teamctl.shared.runs.output",
    "TaskState": "teamctl.shared.task_records",
    "Envelope": "teamctl.shared.envelopes",
    "SystemNotice": "teamctl.shared.envelopes",
    "PeerMessage": "teamctl.shared.envelopes",
    "ProtocolMessage": "teamctl.shared.envelopes",
    "SystemType": "teamctl.shared.envelopes",
    "ProtocolType": "teamctl.shared.envelopes",
    "RunStatus": "teamctl.shared.runs.run_records",
    "TaskStatus": "teamctl.shared.task_records",
    "EventKind": "teamctl.shared.task_records",
    "Usage": "teamctl.shared.agent.replies",
    "RunEvent": "teamctl.shared.runs.output",
    "TaskChange": "teamctl.shared.runs.output",
    "MessageEvent": "teamctl.shared.runs.output",
    "TeamError": "teamctl.shared.errors",
    "ConfigError": "teamctl.shared.errors",
    "ModelError": "teamctl.shared.errors",
    "InfraError": "teamctl.shared.errors",
    "RunFailed": "teamctl.shared.errors",
    "ToolContext": "teamctl.shared.agent.python_tools",
}
"""Each public name and the module it lives in: the result's and the hooks' types included,
since user code receives them."""
__all__ = [
    "ConfigError",
    "Envelope",
    "EventKind",
    "InfraError",
    "McpServer",
    "Member",
    "MemberResult",
    "MessageEvent",
    "ModelError",
    "ModelReply",
    "PeerMessage",
    "Plan",
    "ProtocolMessage",
    "ProtocolType",
    "Run",
    "RunEvent",
    "RunFailed",
    "RunOptions",
    "RunResult",
    "RunStatus",
    "SynthesisResult",
    "SystemNotice",
    "SystemType",
    "TaskChange",
    "TaskSpec",
    "TaskState",
    "TaskStateView",
    "TaskStatus",
    "Team",
    "TeamError",
    "TeamHook",
    "ToolCall",
    "ToolContext",
    "Usage",
    "__version__",
    "attach",
]

if TYPE_CHECKING:
    from teamctl.api import Run, Team, attach
    from teamctl.coordinator.runs.hooks import TeamHook
    from teamctl.shared.agent.mcp_config import McpServer
    from teamctl.shared.agent.python_tools import ToolContext
    from teamctl.shared.agent.replies import ModelReply, ToolCall, Usage
    from teamctl.shared.envelopes import (
        Envelope,
        PeerMessage,
        ProtocolMessage,
        ProtocolType,
        SystemNotice,
        SystemType,
    )
    from teamctl.shared.errors import ConfigError, InfraError, ModelError, RunFailed, TeamError
    from teamctl.shared.runs.options import RunOptions
    from teamctl.shared.runs.output import (
        MemberResult,
        MessageEvent,
        RunEvent,
        RunResult,
        SynthesisResult,
        TaskChange,
        TaskStateView,
    )
    from teamctl.shared.runs.run_records import RunStatus
    from teamctl.shared.task_records import EventKind, Plan, TaskSpec, TaskState, TaskStatus
    from teamctl.shared.team_file import Member


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'teamctl' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
