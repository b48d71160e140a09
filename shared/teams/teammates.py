"""Persistent teammates' records: a team's options and one teammate's state, parsed by model.

A teammate is data in Redis (`TeamKeys.teammate`), played turn by turn by any worker: with no
process of its own, it outlives any worker and any host. These models are what crosses the
process boundary between the CLI, which spawns and messages teammates, and the RQ job that runs
a turn.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from teamctl.shared.agent.mcp_config import McpServer, check_entries, servers_for
from teamctl.shared.agent.model_names import checked_fallbacks
from teamctl.shared.agent.tool_names import (
    TEAMMATE_TOOLS,
    WORKSPACE_TOOLS,
    check_entry,
    is_python_tool,
)
from teamctl.shared.errors import ConfigError, unreadable
from teamctl.shared.ids import RESERVED_MEMBER_IDS, check_team_name
from teamctl.shared.redis.hash_fields import HashCsv, HashInt, HashText
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.text import quoted
from teamctl.shared.workspace.caps import WorkspaceStore, check_workspace_host

DEFAULT_TEAM = "default"
DEFAULT_QUEUE = "members"
TURN_FUNCTION = "teamctl.worker.teams.turn.run_turn"
"""What a turn job runs, enqueued by name so the CLI never imports the worker package."""


class TeammateStatus(StrEnum):
    """A teammate's lifecycle; liveness (its turn lease) is separate."""

    WORKING = "working"
    IDLE = "idle"
    SHUTDOWN = "shutdown"
    PLAN_APPROVAL = "plan_approval"


class IdleReason(StrEnum):
    """Why a turn ended idle (`error: ...` is spelled out with the error)."""

    DONE = "done"
    STEP_LIMIT = "step_limit"
    TIME_LIMIT = "time_limit"
    """The job ran past turn_timeout_s: the turn stops before its next model call."""
    BUDGET = "budget"
    """The team's budget (max_tokens, max_cost_usd) is spent: the turn stops before its next
    model call, or after the call that spent it."""


class TeamMeta(BaseModel):
    """The `meta` record: options, the MCP servers teammates may be given (the team file's
    `[[mcp_servers]]`), and when the team was created."""

    options: TeamOptions = Field(default_factory=TeamOptions)
    mcp_servers: list[McpServer] = Field(default_factory=list)
    created_ms: int = 0
    workspace_store: WorkspaceStore = "local"
    """Where the teammates' workspace files live: the spawner's team directory, or Redis
    (copied into each turn job), chosen when the team is created (TEAMCTL_WORKSPACE_STORE)."""
    workspace_host: str | None = None
    """The host that created a `local` workspace (shared/process/hosts.py this_host): turns, spawns
    and the lead on another host are refused (None: kept in Redis, or a team created before hosts
    were recorded)."""

    def check_host(self, team: str, here: str, who: str = "worker") -> None:
        """WorkspaceElsewhere when the team keeps its files in a directory another host created
        (`here` is this process's host: shared/process/hosts.py this_host)."""
        if self.workspace_store == "local":
            check_workspace_host(f"team {team}", self.workspace_host, here, who)

    def mcp_servers_for(self, entries: Iterable[str]) -> list[McpServer]:
        """The servers a teammate's `mcp` entries name; ConfigError for a malformed entry or
        one naming no server of this team."""
        try:
            return servers_for(check_entries(entries), self.mcp_servers)
        except ValueError as exc:
            hint = (
                ""
                if self.mcp_servers
                else (
                    " (create the team from a team file with [[mcp_servers]]: "
                    "`teamctl team create --file FILE`)"
                )
            )
            raise ConfigError(f"{exc}{hint}") from None

    def check_grants(self) -> None:
        """ConfigError unless what the lead may grant exists: each grantable MCP entry names a
        server of this team, each grantable Python tool imports and clashes with nothing."""
        try:
            servers_for(self.options.grantable_mcp, self.mcp_servers)
        except ValueError as exc:
            raise ConfigError(f"[teammates] grantable_mcp: {exc}") from None
        python = [tool for tool in self.options.grantable_tools if is_python_tool(tool)]
        if python:
            try:
                load_teammate_python_tools(python)
            except ConfigError as exc:
                raise ConfigError(f"[teammates] grantable_tools: {exc}") from None


class ForkOrigin(BaseModel):
    """Where a fork's memory came from (`teamctl team fork`): a teammate's memory as it stood
    after one of its turns."""

    teammate: str
    turn: int


def _fork_origin(value: Any) -> Any:
    """A mate hash's `forked_from` field (JSON, '' for none) as a ForkOrigin's fields."""
    if value == "":
        return None
    return ForkOrigin.model_validate_json(value) if isinstance(value, str) else value


class Teammate(BaseModel):
    """One teammate's record (the `mate:<name>` hash; '' there means absent)."""

    name: str
    role: str = ""
    prompt: str = ""
    status: TeammateStatus
    model: str
    api_base: HashText = None
    queue: str = DEFAULT_QUEUE
    tools: HashCsv = Field(default_factory=list)
    """The workspace tools given at spawn (comma-separated in the hash), `bash` only if listed;
    then its Python tools (`module:function`)."""
    fallbacks: HashCsv = Field(default_factory=list)
    """Models its calls try in order when its own cannot answer (comma-separated)."""
    answered_model: HashText = None
    """The model that answered its last model call (shared/agent/fallbacks.py)."""
    fallback_from: HashText = None
    """Its own model, when a fallback answered that call; None when its own did."""
    mcp: HashCsv = Field(default_factory=list)
    """Its MCP entries: a server of the team's `mcp_servers` ('git', every tool) or one tool
    ('git:git_log')."""
    workspace: HashText = None
    """The team's workspace directory, chosen by the spawner (team_workspace); None: the
    worker's own state dir decides."""
    turn_token: HashText = None
    attempts: HashInt = 0
    last_seen_ms: HashInt = 0
    created_ms: HashInt = 0
    idle_reason: HashText = None
    last_error: HashText = None
    worker: HashText = None
    """host:pid of the process that took the last turn."""
    job_id: HashText = None
    """The RQ job of its last enqueued turn until a turn begins (reconcile leaves a turn whose
    job still waits in its queue alone: waiting for a worker is no crash)."""
    waiting_model: HashText = None
    """The model whose provider slot or pause the turn's call waits for (none: not waiting)."""
    waiting_since_ms: HashInt = 0
    waiting_until_ms: HashInt = 0
    shutdown_request: HashText = None
    """The shutdown request it approved: its turn ends shut down (turn_end.lua)."""
    plan_state: HashText = None
    """Plan mode: 'required' (gated until a plan is approved), 'pending', 'approved'; None
    without plan mode."""
    plan_request: HashText = None
    """Its pending plan request, one at a time."""
    epoch: HashInt = 0
    """How many times it was spawned: a protocol request made in an earlier life is stale."""
    forked_from: Annotated[ForkOrigin | None, BeforeValidator(_fork_origin)] = None
    """The teammate and turn its memory was copied from (`teamctl team fork`); None for one
    spawned with a prompt of its own (a re-spawn clears it)."""

    @classmethod
    def from_hash(cls, team: str, fields: dict[str, str]) -> Teammate:
        """The record as stored; UnreadableRecord when it does not parse."""
        try:
            return cls.model_validate(fields)
        except ValueError as exc:
            raise unreadable(f"teammate {fields.get('name')!r} of team {team}", exc) from exc


class TeamEvent(BaseModel):
    """One entry of a team's events stream: a task's change (as on a run's board), a teammate's
    (`mate`: working, idle, shutdown) or a request's (`request`: pending, approved, rejected,
    expired), in the order they happened."""

    id: str
    status: str
    task_id: str = ""
    mate: str = ""
    """The teammate it is about: the stream's field is named like the `mate:` keys, and keeps
    that name so existing teams' streams still read."""
    request: str = ""
    detail: str = ""
    """Why: spawned, woken, rerun N, a task id, the idle reason; a request's kind and party."""
    token: str = "0"

    @property
    def kind(self) -> str:
        """'task', 'mate' or 'request'."""
        return "mate" if self.mate else "request" if self.request else "task"


class RequestKind(StrEnum):
    """What a protocol request asks (its record's `kind`)."""

    SHUTDOWN = "shutdown"
    PLAN_APPROVAL = "plan_approval"


class RequestStatus(StrEnum):
    """A request's lifecycle: pending until answered, or expired past its deadline."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class TeamRequest(BaseModel):
    """A durable protocol request (the `request:<id>` hash), so a lead restart forgets none."""

    id: str
    kind: RequestKind
    from_: str = Field(alias="from")
    to: str
    status: RequestStatus
    payload: str = ""
    response: str = ""
    created_ms: HashInt = 0
    deadline_ms: HashInt = 0
    resolved_ms: HashInt = 0
    resolved_by: HashText = None
    epoch: HashInt = 0
    """Its teammate's spawn epoch when it was opened: a re-spawn expires it."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)
    """Dumped with `from`, as `team requests --json` prints it."""

    @classmethod
    def from_hash(cls, team: str, fields: dict[str, str]) -> TeamRequest:
        """The record as stored; UnreadableRecord when it does not parse."""
        try:
            return cls.model_validate(fields)
        except ValueError as exc:
            raise unreadable(f"request {fields.get('id')!r} of team {team}", exc) from exc


def new_request_id() -> str:
    """A fresh request id: `req_` and 12 hex digits."""
    return "req_" + secrets.token_hex(6)


def check_teammate_name(name: str) -> str:
    """A teammate name unchanged, or ConfigError (bad shape, or `lead`/`system`)."""
    check_team_name(name, "teammate name")
    if name in RESERVED_MEMBER_IDS:
        raise ConfigError(f"teammate name {name!r} is reserved; choose another name")
    return name


def check_tools(tools: Iterable[str]) -> list[str]:
    """Workspace tool names, deduplicated in WORKSPACE_TOOLS order, then `module:function`
    Python tools in the order given; ConfigError listing the valid ones otherwise. (A Python
    tool is imported by the turn that uses it; `team spawn` imports it first to check it.)"""
    chosen = list(tools)
    for tool in chosen:
        if is_python_tool(tool):
            try:
                check_entry(tool)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        elif tool not in WORKSPACE_TOOLS:
            raise ConfigError(
                f"unknown tool {quoted(tool)}; use --tool with one of: "
                f"{', '.join(WORKSPACE_TOOLS)}, or a Python function as "
                "'package.module:function'"
            )
    python = [tool for tool in dict.fromkeys(chosen) if is_python_tool(tool)]
    return [tool for tool in WORKSPACE_TOOLS if tool in chosen] + python


def load_teammate_python_tools(tools: Iterable[str]) -> None:
    """Import a teammate's Python tools where it is spawned: ConfigError for one that will not
    load, or whose name a teammate or workspace tool has (its turns would only end idle)."""
    from teamctl.shared.agent.python_tools import load_member_tools

    load_member_tools(tools, TEAMMATE_TOOLS + WORKSPACE_TOOLS)


def team_workspace(state_dir: Path, team: str) -> Path:
    """The directory a team's teammates share for their workspace tools, under the state dir;
    built from the validated team name only, so no name reaches a path unchecked."""
    return state_dir / "teams" / check_team_name(team) / "workspace"


def checked_teammate_fallbacks(models: Iterable[str]) -> list[str]:
    """A teammate's fallback models, deduplicated; ConfigError naming a bad one."""
    try:
        return checked_fallbacks(list(models))
    except ValueError as exc:
        raise ConfigError(f"fallback models: {exc}") from None
