"""How tools are named: the workspace tools and the `module:function` form of a Python tool.

Reading a team file, a run's spec or a teammate checks these names. The tool machinery (the
argument models and JSON schemas in tools.py, python_tools.py and shared/workspace/tools.py) stays
unimported until a tool is built, so the CLI's short verbs do not pay for it."""

from __future__ import annotations

import re
from collections.abc import Iterable

WORKSPACE_TOOLS = ("read_file", "write_file", "edit_file", "list_files", "bash")
"""Every workspace tool, in the order a toolbox lists them; `bash` only when enabled."""
TEAMMATE_TOOLS = (
    "send_message",
    "broadcast",
    "read_inbox",
    "list_teammates",
    "respond_shutdown",
    "submit_plan",
    "list_tasks",
    "get_task",
    "claim_task",
    "complete_task",
    "idle",
)
"""A teammate's own tools (worker/teams/teammate_tools.py registers them), known here so that a
spawn refuses a Python tool named like one before any turn runs, and the offline model tells
them from a teammate's Python and MCP tools."""
ENTRY_PATTERN = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
"""`dotted.module:function`: how a team file names a Python tool."""
RESERVED_PREFIX = "team_"
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
"""What providers accept as a function name."""


def is_python_tool(entry: str) -> bool:
    """Whether a tools entry names a Python function rather than a workspace tool."""
    return ":" in entry


def check_entry(entry: str) -> str:
    """The entry unchanged if shaped `dotted.module:function`, else ValueError saying how."""
    if not ENTRY_PATTERN.fullmatch(entry):
        raise ValueError(
            f"tool {entry!r}: write a Python tool as 'package.module:function' "
            "(a dotted module path, a colon, a function name)"
        )
    return entry


def clash(name: str, taken: Iterable[str]) -> str | None:
    """Why a Python tool may not be called `name` (None when it may)."""
    if not TOOL_NAME.fullmatch(name):
        return "a tool name must be 1-64 letters, digits, '_' or '-'"
    if name.startswith(RESERVED_PREFIX):
        return f"names starting with {RESERVED_PREFIX!r} are the team tools'"
    if name in WORKSPACE_TOOLS:
        return "that is a workspace tool's name"
    if name in taken:
        return "another tool of this member has that name"
    return None
