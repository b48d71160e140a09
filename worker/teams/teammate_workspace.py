"""A teammate's own tools (given at spawn: workspace, Python and MCP tools) and the plan-mode
gate on the tools that change things.

The workspace is one directory per team, shared by its teammates: the spawner records it on the
teammate's hash (`team_workspace` under its state dir); a teammate spawned without one uses the
worker's state dir. A team that keeps its workspace in Redis (for workers on hosts that share no
disk) gets a copy of it per turn job instead (shared/workspace/mirror.py), made in a directory
the worker keeps for the team when the teammate has MCP servers. Its MCP servers start there,
kept warm by the worker for the team's next turns (worker/mcp_warm), but in a turn's private
copy (a worker without a keeper), which they go with.
These tools act outside Redis, so a turn rerun after a crash may repeat them (team tools commit
inside the checkpoint and do not).

Plan mode: until the lead approves its plan, a teammate's gated tools answer with a tool error
saying what to do: the workspace and task tools that change things, and every MCP tool its
server does not mark read-only. The gate reads `plan_state` at each call, not once per turn,
because the lead may approve while the turn is running.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from teamctl.shared.agent.mcp_config import offered_name
from teamctl.shared.agent.mcp_tools import McpSessions, McpTimeouts, add_mcp_tools
from teamctl.shared.agent.python_tools import ToolContext, add_python_tools
from teamctl.shared.agent.tool_names import is_python_tool
from teamctl.shared.agent.tools import ToolArgs, Toolbox
from teamctl.shared.errors import ToolFailed
from teamctl.shared.process.hosts import this_host
from teamctl.shared.process.private_files import private_dir
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import Teammate, TeamMeta, team_workspace
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import Fence, WorkspaceFiles
from teamctl.shared.workspace.tools import add_workspace_tools
from teamctl.worker.mcp_warm.client import Warmth, kept_workspace_root, mcp_sessions
from teamctl.worker.mcp_warm.protocol import Scope

log = logging.getLogger(__name__)

PLAN_GATED = ("write_file", "edit_file", "bash", "claim_task", "complete_task")
"""Tools a teammate in plan mode may not use before its plan is approved (those it has)."""
APPROVED = "approved"


class PlanNotApproved(ToolFailed):
    """A gated tool called in plan mode before the lead approved the plan."""


def workspace_root(teammate: Teammate, team: str, state_dir: Path) -> Path:
    """Where the teammate's workspace tools work: the directory its spawner recorded, else the
    team's directory under this worker's state dir."""
    return Path(teammate.workspace) if teammate.workspace else team_workspace(state_dir, team)


def ensure_workspace(teammate: Teammate, team: str, state_dir: Path) -> Path:
    """The teammate's workspace root, created if missing (logged if it cannot be: its tools
    then fail with errors the model can report)."""
    root = workspace_root(teammate, team, state_dir)
    try:
        private_dir(root)
    except OSError as exc:
        log.warning("workspace of %s not created: %s", teammate.name, exc)
    return root


def tools_meta(store: TeamStore, teammate: Teammate) -> TeamMeta | None:
    """The team's meta, read once per turn for the tools that use the team's workspace (None:
    the teammate has none of them, and nothing below is needed)."""
    return store.meta() if teammate.tools or teammate.mcp else None


def check_teammate_host(store: TeamStore, meta: TeamMeta) -> None:
    """WorkspaceElsewhere when the team's workspace is a directory another host created: a
    teammate's tools would work on files the others never see."""
    meta.check_host(store.team, this_host())


def open_mirror(
    store: TeamStore, meta: TeamMeta, teammate: Teammate, token: str
) -> WorkspaceMirror | None:
    """The turn's copy of the team's workspace when the team keeps it in Redis (its saves
    fenced by the turn's lease); else None. A teammate with MCP servers copies it where they
    can stay warm for the team's next turns."""
    if meta.workspace_store != "redis":
        return None
    keys = store.keys
    return WorkspaceMirror.open(
        WorkspaceFiles(
            store.conn,
            keys,
            store.options.file_caps,
            Fence("turn", keys.turn(teammate.name), token),
        ),
        kept_workspace_root(os.environ, team_scope(store.team, meta)) if teammate.mcp else None,
    )


def team_scope(team: str, meta: TeamMeta) -> Scope:
    """What the team's warm sessions belong to: the team as created (not one made again under
    its name)."""
    return Scope(kind="team", id=team, created_ms=meta.created_ms)


def add_teammate_workspace(
    toolbox: Toolbox,
    store: TeamStore,
    teammate: Teammate,
    state_dir: Path,
    root: Path | None = None,
) -> None:
    """Add the teammate's workspace tools, then gate what plan mode forbids; `root` is the
    turn's copy of a workspace kept in Redis (None: the team's directory)."""
    if any(not is_python_tool(tool) for tool in teammate.tools):
        root = root or ensure_workspace(teammate, store.team, state_dir)
        add_workspace_tools(toolbox, Workspace(root), teammate.tools)
    if teammate.plan_state is not None:  # plan mode is set at spawn only: without it, no gate
        gate_plan(toolbox, lambda: store.plan_state(teammate.name))


def add_teammate_python_tools(
    toolbox: Toolbox,
    store: TeamStore,
    teammate: Teammate,
    state_dir: Path,
    heartbeat: Callable[[], bool],
    root: Path | None = None,
) -> None:
    """Add the teammate's Python tools after the others (not plan-gated: what they change is
    theirs to say); ConfigError when one will not import on this worker or its name is taken.
    Their heartbeat refreshes the turn lease."""
    context = ToolContext(
        member_id=teammate.name,
        workspace=root or workspace_root(teammate, store.team, state_dir),
        heartbeat=heartbeat,
        team_id=store.team,
    )
    add_python_tools(
        toolbox,
        teammate.tools,
        context,
        store.options.tool_result_max_chars,
        timeout_s=store.options.tool_wait_s,
    )


def mcp_hub(
    store: TeamStore,
    meta: TeamMeta,
    teammate: Teammate,
    state_dir: Path,
    mirror: WorkspaceMirror | None = None,
) -> McpSessions:
    """The MCP sessions of the teammate's turn: stdio servers start in its workspace. Those in
    the team's directory, or in the worker's kept copy of a workspace kept in Redis, stay warm
    in the worker for the team's next turns; those in a turn's private copy are its own."""
    options = store.options
    warmth = (
        Warmth(team_scope(store.team, meta), options.mcp_idle_s, tuple(teammate.mcp))
        if mirror is None or mirror.kept
        else None
    )
    return mcp_sessions(
        os.environ,
        mirror.root if mirror else ensure_workspace(teammate, store.team, state_dir),
        McpTimeouts(
            options.mcp_start_timeout_s, options.mcp_list_timeout_s, options.mcp_call_timeout_s
        ),
        f"{store.team}:{teammate.name}",
        warmth,
    )


def add_teammate_mcp_tools(
    toolbox: Toolbox, store: TeamStore, meta: TeamMeta, teammate: Teammate, hub: McpSessions
) -> None:
    """Start the teammate's MCP servers and offer the tools its entries allow, last; in plan
    mode, those their server does not mark read-only are gated. ConfigError when a server
    will not start or list its tools (the turn ends idle with that error)."""
    changing = []
    for server in meta.mcp_servers_for(teammate.mcp):
        listed = hub.start(server)
        added = add_mcp_tools(
            toolbox, hub, server, listed, teammate.mcp, store.options.tool_result_max_chars
        )
        read_only = {offered_name(server.name, tool.name) for tool in listed if tool.read_only}
        changing += [name for name in added if name not in read_only]
    if teammate.plan_state is not None:
        gate_plan(toolbox, lambda: store.plan_state(teammate.name), changing)


def gate_plan(
    toolbox: Toolbox, plan_state: Callable[[], str | None], names: Iterable[str] = PLAN_GATED
) -> None:
    """Wrap each of `names` the toolbox has so it first checks `plan_state()`."""
    for name in names:
        tool = toolbox.get(name)
        if tool is not None:
            # wrap, not add: an MCP tool keeps its server's schema and every tool its cap.
            toolbox.wrap(tool.name, _gated(tool.name, tool.fn, plan_state))


def _gated(
    name: str, fn: Callable[[Any], Any], plan_state: Callable[[], str | None]
) -> Callable[[ToolArgs], Any]:
    def gated(args: ToolArgs) -> Any:
        state = plan_state()
        if state is not None and state != APPROVED:
            raise PlanNotApproved(plan_refusal(name, state))
        return fn(args)

    return gated


def plan_refusal(tool: str, state: str) -> str:
    """What a gated tool answers before approval: why, and what to do next."""
    if state == "pending":
        return (
            f"{tool} is not allowed yet: you are in plan mode and your plan is waiting for "
            "the lead's review; wait for the lead's plan_approval_response (end your turn, "
            "its answer wakes you)"
        )
    return (
        f"{tool} is not allowed yet: you are in plan mode and have no approved plan; call "
        "submit_plan with your plan, then wait for the lead's plan_approval_response "
        "(a rejection says what to revise)"
    )
