"""The team file, run options and the run spec stored in Redis for workers to read."""

from __future__ import annotations

import json
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
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
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.agent.tool_names import WORKSPACE_TOOLS, check_entry, clash, is_python_tool
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import RESERVED_MEMBER_IDS, is_safe_id, normalize_id
from teamctl.shared.runs.retention import DEFAULT_RETENTION_S, MAX_RETENTION_S
from teamctl.shared.teams.teammates import TeamOptions
from teamctl.shared.text import quoted

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

DEFAULT_MAX_ROUNDS = 64
MAX_DURATION_S = 7 * 24 * 3600
"""Upper bound of every timeout and TTL option: a week is beyond any sane run, and keeps
deadlines and Redis expiries (milliseconds) far from overflow."""
PROVIDER_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "MISTRAL_API_KEY",
                     "GROQ_API_KEY", "DEEPSEEK_API_KEY", "OPENROUTER_API_KEY")
"""The provider keys that pick a default model, first set wins."""
DEFAULT_MODEL_FOR_KEY = {
    "OPENAI_API_KEY": "gpt-4o-mini",
    "ANTHROPIC_API_KEY": "anthropic/claude-3-5-haiku-latest",
    "GEMINI_API_KEY": "gemini/gemini-2.0-flash",
    "MISTRAL_API_KEY": "mistral/mistral-small-latest",
    "GROQ_API_KEY": "groq/llama-3.1-8b-instant",
    "DEEPSEEK_API_KEY": "deepseek/deepseek-chat",
    "OPENROUTER_API_KEY": "openrouter/openai/gpt-4o-mini",
}


REMOVED_OPTIONS = {
    "allow_dynamic_member_registration":
        "removed: a run's roster is fixed once it starts (members cannot be added to a live run; "
        "README, Run options)",
}
"""Options that no longer exist, with why: a team names them as a ConfigError
(refuse_removed_options), a stored spec that has one still loads (RunOptions._forget_removed)."""


def refuse_removed_options(options: object, source: str, fix: str) -> None:
    """ConfigError naming a removed option in `options` (a team's raw options) and `fix`."""
    if not isinstance(options, dict):
        return
    for name in sorted(REMOVED_OPTIONS.keys() & options.keys()):
        raise ConfigError(f"{source}: options.{name}: {REMOVED_OPTIONS[name]}; {fix}")


class RunOptions(BaseModel):
    """Every run option, with AI4J's defaults plus teamctl's own (DESIGN §7).

    Every number is finite and bounded above (a value out of range is a ConfigError naming the
    flag or the team file field): an infinite timeout overflowed deadlines, an infinite float
    was stored as JSON null, a huge retention made Redis refuse the EXPIRE. `<= 0` keeps its
    AI4J meaning ("the default") where it had one (max_concurrency, max_rounds,
    message_history_limit).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    parallel_dispatch: bool = True
    max_concurrency: int = Field(4, le=1024)
    max_rounds: int = Field(DEFAULT_MAX_ROUNDS, le=10_000)
    continue_on_member_error: bool = True
    fail_on_unknown_member: bool = False
    broadcast_on_planner_failure: bool = True
    enable_message_bus: bool = True
    include_original_objective_in_dispatch: bool = True
    include_task_context_in_dispatch: bool = True
    include_message_history_in_dispatch: bool = True
    message_history_limit: int = Field(20, le=10_000)
    require_plan_approval: bool = False
    enable_member_team_tools: bool = True
    dispatch: Literal["eager", "barrier"] = "eager"
    heartbeat_ttl_s: float = Field(30.0, gt=0, le=MAX_DURATION_S)
    max_attempts: int = Field(3, ge=1, le=100)
    member_max_steps: int = Field(16, ge=1, le=1_000_000)
    max_tokens: int | None = Field(None, ge=1, le=10**12)
    max_cost_usd: float | None = Field(None, gt=0, le=1_000_000)
    timeout_s: float = Field(1800.0, gt=0, le=MAX_DURATION_S)
    model_timeout_s: float = Field(120.0, gt=0, le=MAX_DURATION_S)
    model_max_retries: int = Field(3, ge=0, le=100)
    max_message_bytes: int = Field(65536, ge=1, le=16 * 1024 * 1024)
    dependency_output_chars: int = Field(4000, ge=0, le=1_000_000)
    bus_max_messages: int = Field(100_000, ge=1, le=10_000_000)
    lease_ttl_s: float = Field(15.0, gt=0, le=MAX_DURATION_S)
    redis_outage_s: float = Field(60.0, gt=0, le=MAX_DURATION_S)
    """How long every process keeps retrying through a Redis restart or failover."""
    retention_s: int = Field(DEFAULT_RETENTION_S, ge=1, le=MAX_RETENTION_S)
    transcript_max_chars: int = Field(100_000, ge=0, le=100_000_000)
    """Longest transcript (messages and tool results, as JSON) kept per task for the result;
    0 keeps none."""
    tool_result_max_chars: int = Field(20_000, ge=100, le=10_000_000)
    """Longest result a Python or MCP tool gives the model; longer ones are cut and say so."""
    tool_timeout_s: float = Field(120.0, gt=0, le=MAX_DURATION_S)
    """How long one Python tool call may run; then the model gets a ToolTimeout error and the
    call is abandoned (its thread can no longer refresh the claim)."""
    max_task_releases: int = Field(3, ge=0, le=100)
    """How often members may give one task back with team_release_task; the next release
    fails it instead, so a task cannot pass between jobs for ever."""
    mcp_start_timeout_s: float = Field(30.0, gt=0, le=3600)
    """How long an MCP server may take to start and answer the handshake (else the task fails)."""
    mcp_list_timeout_s: float = Field(30.0, gt=0, le=3600)
    """How long listing an MCP server's tools may take (else the task fails)."""
    mcp_call_timeout_s: float = Field(60.0, gt=0, le=MAX_DURATION_S)
    """How long one MCP tool call may take; a slower one is a TOOL_ERROR result."""

    @model_validator(mode="before")
    @classmethod
    def _forget_removed(cls, data: Any) -> Any:
        """Specs stored before an option was removed still load (team files are told, in
        load_team_file)."""
        if isinstance(data, dict) and REMOVED_OPTIONS.keys() & data.keys():
            return {k: v for k, v in data.items() if k not in REMOVED_OPTIONS}
        return data

    @property
    def tool_wait_s(self) -> float:
        """How long a member waits for one Python tool call: tool_timeout_s, but never past the
        run's own bound (its job would be killed first and the task reclaimed, the call with
        it)."""
        return min(self.tool_timeout_s, self.timeout_s)

    def batch_size(self) -> int:
        """How many tasks one round may dispatch."""
        return max(1, self.max_concurrency) if self.parallel_dispatch else 1

    def round_limit(self) -> int:
        """max_rounds, where 0 or less means the default 64 (as in AI4J)."""
        return self.max_rounds if self.max_rounds > 0 else DEFAULT_MAX_ROUNDS


def checked_queue(queue: str) -> str:
    """An RQ queue name as a team file may give it (it becomes part of Redis keys)."""
    if not is_safe_id(queue):
        raise ValueError(f"queue {queue!r}: use letters, digits, '.', '_' or '-', starting "
                         "with a letter or digit")
    return queue


class Member(BaseModel):
    """A team member as configured; `id` is normalized on load."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str | None = None
    description: str | None = None
    model: str | None = None
    tools: list[str] = Field(default_factory=list)
    mcp: list[str] = Field(default_factory=list)
    """MCP servers (`git`: all their tools) or single tools (`git:git_log`) this member has."""
    mcp_servers: list[McpServer] = Field(default_factory=list)
    """The servers `mcp` names, filled in from the team file's `[[mcp_servers]]` so that the
    run's spec carries them to the workers; a team file sets `mcp`, never this."""
    queue: str = "members"

    @field_validator("id")
    @classmethod
    def _normalize_member_id(cls, raw: str) -> str:
        member_id = normalize_id(raw)
        if member_id is None:
            raise ValueError("team member id is required (letters, digits, '_' or '-')")
        if member_id in RESERVED_MEMBER_IDS:
            raise ValueError(f"member id {member_id!r} is reserved; choose another id")
        return member_id

    @field_validator("queue")
    @classmethod
    def _safe_queue(cls, queue: str) -> str:
        return checked_queue(queue)

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
                raise ValueError(f"unknown tool {tool!r}; available: {', '.join(WORKSPACE_TOOLS)}"
                                 ", or a Python function as 'package.module:function'")
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
    queue: str = "members"

    @field_validator("queue")
    @classmethod
    def _safe_queue(cls, queue: str) -> str:
        return checked_queue(queue)


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
    planner: RoleModel = Field(default_factory=RoleModel)
    synthesizer: RoleModel = Field(default_factory=RoleModel)
    members: list[Member] = Field(default_factory=lambda: list(DEFAULT_MEMBERS), min_length=1)
    options: RunOptions = Field(default_factory=RunOptions)
    hooks: list[str] = Field(default_factory=list)
    mcp_servers: list[McpServer] = Field(default_factory=list)
    """MCP servers members may use (a member's `mcp` names them)."""
    teammates: TeamOptions = Field(default_factory=TeamOptions)
    """Options of a persistent team made from this file (`teamctl team create --file`)."""

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
        for one that will not load or whose name clashes (python_tools.check_team_tools)."""
        from teamctl.shared.agent.python_tools import check_team_tools

        check_team_tools(self)

    def resolve_mcp_commands(self, base_dir: Path) -> TeamFile:
        """This team with every relative MCP command path made absolute against `base_dir`
        (the team file's directory; the current one for a team given in code), in
        `mcp_servers` and in the members' copies, which the run's spec stores: workers run the
        path that was checked here, never one found in a workspace."""
        servers = [resolved_command(server, base_dir) for server in self.mcp_servers]
        if servers == self.mcp_servers:
            return self
        by_name = {server.name: server for server in servers}
        members = [member.model_copy(update={
            "mcp_servers": [by_name[server.name] for server in member.mcp_servers]})
            for member in self.members]
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
                    "and name that path")

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
                raise ValueError(f"member {member.id}: configure servers in [[mcp_servers]] "
                                 "and name them in the member's mcp, not mcp_servers")
            # A copy: a Member given in code (the Python API) must not change under its caller.
            self.members[index] = member.model_copy(update={"mcp_servers": servers})
            for tool in member.tools:
                function = tool.partition(":")[2]
                if any(function.startswith(s.name + SEPARATOR) for s in servers):
                    raise ValueError(f"member {member.id}: tool {tool!r} would clash with the "
                                     "MCP server's tools (named 'server__tool'); rename it")
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
    refuse_removed_options(raw.get("options") if isinstance(raw, dict) else None,
                           f"team file {path}", "delete it from the team file")
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
        message = ("unknown field; check its spelling (`teamctl run --help` lists the run "
                   "options, the README the team file fields)")
    return ConfigError(f"{source}: {where}: {message}")


def _read_structured(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read team file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"team file {path} is not UTF-8 text (byte {exc.start}); "
                          "save it as UTF-8") from exc
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


class ModelChoice(BaseModel):
    """The resolved model string for each role, and where to reach it."""

    planner: str
    synthesizer: str
    member_default: str
    member_override: str | None = None
    """`--model`: every member uses it, whatever the team file says."""
    api_base: str | None = None

    def for_member(self, member: Member) -> str:
        """`--model` > the member's own model > the team-wide default: choose_models' order,
        finished in the worker, which reads the member from the run's stored spec."""
        return self.member_override or member.model or self.member_default


class ModelSource(StrEnum):
    """Where a model came from, in precedence order."""

    FLAG = "--model"
    TEAM_FILE = "team file"
    ENVIRONMENT = "TEAMCTL_MODEL"
    PROVIDER_KEY = "provider key"
    OFFLINE = "offline model"


def pick_model(flag: str | None, team_file: str | None,
               settings: Settings) -> tuple[str, ModelSource]:
    """The one precedence for any role: --model > the team file > TEAMCTL_MODEL > the small
    default of the first provider with a key set > the built-in offline model."""
    for model, source in ((flag, ModelSource.FLAG), (team_file, ModelSource.TEAM_FILE),
                          (settings.model, ModelSource.ENVIRONMENT)):
        if model:
            return model, source
    for var in PROVIDER_KEY_VARS:
        if var in settings.provider_keys:
            return DEFAULT_MODEL_FOR_KEY[var], ModelSource.PROVIDER_KEY
    return OFFLINE_MODEL, ModelSource.OFFLINE


def choose_models(team: TeamFile, model_flag: str | None, api_base_flag: str | None,
                  settings: Settings) -> tuple[ModelChoice, ModelSource]:
    """Every role's model and the API base, and where the team-wide default came from (the
    CLI says so on stderr when that is the offline model)."""
    default, source = pick_model(model_flag, team.model, settings)
    choice = ModelChoice(
        planner=pick_model(model_flag, team.planner.model or team.model, settings)[0],
        # As AI4J: a synthesizer without a model of its own uses the planner's.
        synthesizer=pick_model(model_flag, team.synthesizer.model or team.planner.model
                               or team.model, settings)[0],
        member_default=default,
        member_override=model_flag,
        api_base=checked_api_base(api_base_flag, settings))
    return choice, source


def checked_api_base(flag: str | None, settings: Settings) -> str | None:
    """--api-base, else TEAMCTL_API_BASE; anything but an http(s) URL is a ConfigError now,
    not a run whose every model call fails with "Connection error"."""
    value, where = (flag, "--api-base") if flag else (settings.api_base, "TEAMCTL_API_BASE")
    if not value:
        return None
    try:
        parts = urlsplit(value)
        valid = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        valid = False
    if not valid:
        raise ConfigError(f"{where} {quoted(value)} is not an http(s) URL; give the server's "
                          "base URL, e.g. http://127.0.0.1:8000/v1")
    return value


class RunSpec(BaseModel):
    """What a run is: stored once in Redis, read by every worker."""

    run_id: str
    team_id: str
    objective: str
    members: list[Member]
    options: RunOptions
    models: ModelChoice
    workspace_dir: str
    created_ms: int
    hooks: list[str] = Field(default_factory=list)
    planner_queue: str = "members"
    synthesizer_queue: str = "members"
    """Where the planner's and the synthesizer's model calls run (workers hold the keys)."""

    @property
    def queues(self) -> list[str]:
        """Every queue the run's jobs go to: the members', the planner's, the synthesizer's."""
        return sorted({m.queue for m in self.members} | {self.planner_queue,
                                                          self.synthesizer_queue})

    def mcp_variables(self) -> set[str]:
        """The worker environment variables the members' MCP servers read."""
        return {name for m in self.members for server in m.mcp_servers
                for name in server.variables()}

    def member(self, member_id: str | None) -> Member | None:
        """The member with exactly this (normalized) id."""
        return next((m for m in self.members if m.id == member_id), None)

    def resolve_member(self, raw_member_id: str | None) -> Member | None:
        """AI4J's resolution: blank -> first member; known -> it; unknown -> None."""
        if not raw_member_id or not raw_member_id.strip():
            return self.members[0]
        return self.member(normalize_id(raw_member_id))

    def member_for(self, raw_member_id: str | None) -> Member | None:
        """The member that runs a task: unknown ids go to the first member unless the run fails
        them (fail_on_unknown_member)."""
        member = self.resolve_member(raw_member_id)
        if member is None and not self.options.fail_on_unknown_member:
            return self.members[0]
        return member
