"""The team file (`--team`, `team create --file`): members, roles, MCP servers, and the options
of both kinds of team it configures, a planned run's `[options]` and a persistent team's
`[teammates]`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from teamctl.shared.agent.mcp_config import (
    SEPARATOR,
    McpServer,
    check_entries,
    inside,
    resolved_command,
    servers_for,
)
from teamctl.shared.agent.model_names import Fallbacks
from teamctl.shared.agent.tool_names import WORKSPACE_TOOLS, check_entry, clash, is_python_tool
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import QUEUE_RULE, RESERVED_MEMBER_IDS, is_safe_id, normalize_id
from teamctl.shared.providers.limits_config import ModelLimit
from teamctl.shared.runs.options import RunOptions, refuse_removed_options
from teamctl.shared.teams.options import TeamOptions


def checked_queue(queue: str) -> str:
    """A queue as a team file gives it (a ValueError pydantic reports with the field)."""
    if not is_safe_id(queue):
        raise ValueError(f"queue {queue!r}: {QUEUE_RULE}")
    return queue


QueueName = Annotated[str, AfterValidator(checked_queue)]
"""An RQ queue named in a team file: it becomes part of Redis keys."""


class Member(BaseModel):
    """A team member as configured; `id` is normalized on load."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str | None = None
    description: str | None = None
    model: str | None = None
    fallbacks: Fallbacks | None = None
    """Models tried in order when this member's own cannot answer (None: the team's
    `fallbacks`; [] none)."""
    tools: list[str] = Field(default_factory=list)
    mcp: list[str] = Field(default_factory=list)
    """MCP servers (`git`: all their tools) or single tools (`git:git_log`) this member has."""
    mcp_servers: list[McpServer] = Field(default_factory=list)
    """The servers `mcp` names, filled in from the team file's `[[mcp_servers]]` so that the
    run's spec carries them to the workers; a team file sets `mcp`, never this."""
    queue: QueueName = "members"

    @field_validator("id")
    @classmethod
    def _normalize_member_id(cls, raw: str) -> str:
        member_id = normalize_id(raw)
        if member_id is None:
            raise ValueError("team member id is required (letters, digits, '_' or '-')")
        if member_id in RESERVED_MEMBER_IDS:
            raise ValueError(f"member id {member_id!r} is reserved; choose another id")
        return member_id

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: list[str]) -> list[str]:
        """Workspace tool names, or `module:function` Python tools whose function name is free
        (the coordinator's check imports them: their __name__ may still differ)."""
        functions: set[str] = set()
        for tool in tools:
            if is_python_tool(tool):
                function = check_entry(tool).partition(":")[2]
                reason = clash(function, functions)
                if reason:
                    raise ValueError(f"tool {tool!r}: {reason}; rename the function")
                functions.add(function)
            elif tool.startswith("team_"):
                raise ValueError(f"tool {tool!r}: names starting with 'team_' are reserved")
            elif tool not in WORKSPACE_TOOLS:
                raise ValueError(
                    f"unknown tool {tool!r}; available: {', '.join(WORKSPACE_TOOLS)}"
                    ", or a Python function as 'package.module:function'"
                )
        return tools

    @field_validator("mcp")
    @classmethod
    def _mcp_entries(cls, entries: list[str]) -> list[str]:
        return check_entries(entries)

    @property
    def display_name(self) -> str:
        return self.name or self.id


class RoleModel(BaseModel):
    """A coordinator role (planner, synthesizer): its model override and the queue whose
    workers make its model call."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    fallbacks: Fallbacks | None = None
    """Models tried in order when the role's own cannot answer (None: the team's
    `fallbacks`, or for the synthesizer without a model of its own the planner's)."""
    queue: QueueName = "members"


DEFAULT_MEMBERS = [
    Member(id="researcher", name="Researcher", description="finding and checking facts"),
    Member(id="analyst", name="Analyst", description="reasoning, comparison and structure"),
    Member(id="writer", name="Writer", description="clear, concise writing"),
]


class TeamFile(BaseModel):
    """The team file (`--team`, .toml/.yaml/.json)."""

    model_config = ConfigDict(extra="forbid")

    team_id: str = "default"
    model: str | None = None
    fallbacks: Fallbacks = Field(default_factory=list)
    """Models every role tries in order when its own cannot answer (a role's own
    `fallbacks` replace them)."""
    planner: RoleModel = Field(default_factory=RoleModel)
    synthesizer: RoleModel = Field(default_factory=RoleModel)
    members: list[Member] = Field(default_factory=lambda: list(DEFAULT_MEMBERS), min_length=1)
    options: RunOptions = Field(default_factory=RunOptions)
    hooks: list[str] = Field(default_factory=list)
    mcp_servers: list[McpServer] = Field(default_factory=list)
    """MCP servers members may use (a member's `mcp` names them)."""
    teammates: TeamOptions = Field(default_factory=TeamOptions)
    """Options of a persistent team made from this file (`teamctl team create --file`)."""
    limits: dict[str, ModelLimit] = Field(default_factory=dict)
    """Provider limits per model string (`[limits."openai/gpt-4o-mini"] rpm = 500`), for every
    worker that calls the model for this run or team (shared/providers/limits_config.py)."""

    @field_validator("team_id")
    @classmethod
    def _safe_team_id(cls, team_id: str) -> str:
        if not is_safe_id(team_id):
            raise ValueError("use 1-128 letters, digits, '.', '_' or '-' (it names export files)")
        return team_id

    @field_validator("hooks")
    @classmethod
    def _hook_paths(cls, hooks: list[str]) -> list[str]:
        for hook in hooks:
            module, _, attr = hook.partition(":")
            if not module.strip() or not attr.strip():
                raise ValueError(f"hook {hook!r}: write it as 'package.module:ClassName'")
        return hooks

    def synthesizer_queue(self) -> str:
        """The synthesizer's queue: its own, else (when it sets neither a model nor a queue, and
        so uses the planner's model, as AI4J) the planner's, whose workers hold that model's
        keys."""
        own = self.synthesizer
        if own.model is None and "queue" not in own.model_fields_set:
            return self.planner.queue
        return own.queue

    def check_python_tools(self) -> None:
        """Import every member's Python tools here, before a run starts: ConfigError (exit 2)
        for one that will not load or whose name clashes."""
        from teamctl.shared.agent.python_tools import load_member_tools

        for member in self.members:
            try:
                load_member_tools(member.tools)
            except ConfigError as exc:
                raise ConfigError(f"member {member.id}: {exc}") from exc

    def resolve_mcp_commands(self, base_dir: Path) -> TeamFile:
        """This team with every relative MCP command path made absolute against `base_dir`
        (the team file's directory; the current one for a team given in code), in
        `mcp_servers` and in the members' copies, which the run's spec stores: workers run the
        path that was checked here, never one found in a workspace."""
        servers = [resolved_command(server, base_dir) for server in self.mcp_servers]
        if servers == self.mcp_servers:
            return self
        by_name = {server.name: server for server in servers}
        members = [
            member.model_copy(
                update={"mcp_servers": [by_name[server.name] for server in member.mcp_servers]}
            )
            for member in self.members
        ]
        return self.model_copy(update={"mcp_servers": servers, "members": members})

    def check_mcp_commands(self, state_dir: Path) -> None:
        """ConfigError (exit 2) for an MCP command path inside teamctl's state dir, where every
        workspace lives: a member's write_file could rewrite what its server runs."""
        for index, server in enumerate(self.mcp_servers):
            command = server.command[0] if server.command else ""
            if "/" in command and inside(command, state_dir):
                raise ConfigError(
                    f"mcp_servers.{index}.command: MCP server {server.name!r} would run "
                    f"{command}, inside teamctl's state dir {state_dir}, where the agents' "
                    "workspaces are and members write files; install the server outside it "
                    "and name that path"
                )

    @field_validator("mcp_servers")
    @classmethod
    def _unique_servers(cls, servers: list[McpServer]) -> list[McpServer]:
        names = [server.name for server in servers]
        duplicate = next((name for name in names if names.count(name) > 1), None)
        if duplicate:
            raise ValueError(f"two MCP servers are named {duplicate!r}; names must be unique")
        return servers

    @model_validator(mode="after")
    def _resolve_member_servers(self) -> TeamFile:
        """Give each member the servers its `mcp` entries name; ValueError (exit 2) for an
        entry naming no configured server, or a Python tool named like a server's tools."""
        for index, member in enumerate(self.members):
            try:
                servers = servers_for(member.mcp, self.mcp_servers)
            except ValueError as exc:
                raise ValueError(f"member {member.id}: {exc}") from None
            if "mcp_servers" in member.model_fields_set and member.mcp_servers != servers:
                raise ValueError(
                    f"member {member.id}: configure servers in [[mcp_servers]] "
                    "and name them in the member's mcp, not mcp_servers"
                )
            # A copy: a Member given in code (the Python API) must not change under its caller.
            self.members[index] = member.model_copy(update={"mcp_servers": servers})
            for tool in member.tools:
                function = tool.partition(":")[2]
                if any(function.startswith(s.name + SEPARATOR) for s in servers):
                    raise ValueError(
                        f"member {member.id}: tool {tool!r} would clash with the "
                        "MCP server's tools (named 'server__tool'); rename it"
                    )
        return self

    @field_validator("members")
    @classmethod
    def _unique_members(cls, members: list[Member]) -> list[Member]:
        seen: set[str] = set()
        for member in members:
            if member.id in seen:
                raise ValueError(f"duplicate team member id: {member.id}")
            seen.add(member.id)
        return members


def load_team_file(path: Path | None) -> TeamFile:
    """Read and validate a team file, its relative MCP command paths resolved against its
    directory (whoever stores the team checks them: TeamFile.check_mcp_commands); None gives
    the default team."""
    if path is None:
        return TeamFile()
    raw = _read_structured(path)
    refuse_removed_options(
        raw.get("options") if isinstance(raw, dict) else None,
        f"team file {path}",
        "delete it from the team file",
    )
    try:
        team = TeamFile.model_validate(raw)
    except ValidationError as exc:
        raise team_error(exc, f"team file {path}") from exc
    return team.resolve_mcp_commands(path.absolute().parent)


def team_error(exc: ValidationError, source: str) -> ConfigError:
    """A team that does not validate as one line: where (`source`, the field) and what."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    message = first["msg"]
    if first["type"] == "extra_forbidden":
        message = (
            "unknown field; check its spelling (`teamctl run --help` lists the run "
            "options, docs/guides/planned-runs.md the team file fields)"
        )
    return ConfigError(f"{source}: {where}: {message}")


def _read_structured(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read team file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"team file {path} is not UTF-8 text (byte {exc.start}); save it as UTF-8"
        ) from exc
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            return _load_yaml(text)
        if suffix == ".json":
            return json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, _InvalidYaml) as exc:
        raise ConfigError(f"team file {path} is not valid {suffix[1:]}: {exc}") from exc
    raise ConfigError(f"team file {path}: use a .toml, .yaml or .json file")


class _InvalidYaml(ValueError):
    """yaml.YAMLError, seen without importing PyYAML for the other formats."""


def _load_yaml(text: str) -> Any:
    """PyYAML is imported only for a YAML team file: ~25 ms of every `teamctl run` otherwise."""
    import yaml

    try:
        return yaml.safe_load(text) or {}
    except yaml.MarkedYAMLError as exc:  # PyYAML's own text spans several lines: make it one
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise _InvalidYaml(f"{exc.problem or exc.context}{where}") from exc
    except yaml.YAMLError as exc:
        raise _InvalidYaml(" ".join(str(exc).split())) from exc
