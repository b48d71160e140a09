"""Public API for the team's own Python tools: annotate a parameter `ToolContext` to receive the
run, task and member a call serves, the workspace path, and a heartbeat for long work; decorate a
function `@tool(idempotent=True)` or `@tool(read_only=True)` to let a call a crash left in doubt
run again."""

from teamctl.shared.agent.python_tools import ToolContext, tool

__all__ = ["ToolContext", "tool"]
