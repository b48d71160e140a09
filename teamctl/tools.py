"""Public API for the team's own Python tools: annotate a parameter `ToolContext` to receive the
run, task and member a call serves, the workspace path, and a heartbeat for long work."""

from teamctl.shared.agent.python_tools import ToolContext

__all__ = ["ToolContext"]
