"""What a run is: the models each role uses and the run spec stored in Redis for workers."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pydantic import BaseModel, Field
from teamctl.shared.agent.model_names import checked_fallbacks
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import normalize_id
from teamctl.shared.providers.limits_config import ModelLimit
from teamctl.shared.runs.lineage import Lineage
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.team_file import Member, TeamFile
from teamctl.shared.text import quoted
from teamctl.shared.workspace.caps import WorkspaceStore

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

PROVIDER_KEY_VARS = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
)
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


class ModelChoice(BaseModel):
    """The resolved model string for each role, and where to reach it."""

    planner: str
    synthesizer: str
    member_default: str
    member_override: str | None = None
    """`--model`: every member uses it, whatever the team file says."""
    api_base: str | None = None
    planner_fallbacks: list[str] = Field(default_factory=list)
    synthesizer_fallbacks: list[str] = Field(default_factory=list)
    member_fallbacks: list[str] = Field(default_factory=list)
    """The team-wide fallbacks (a member's own replace them)."""
    fallback_override: list[str] | None = None
    """`--fallback-model`: every role tries these, whatever the team file says."""

    def for_member(self, member: Member) -> str:
        """`--model` > the member's own model > the team-wide default: choose_models' order,
        finished in the worker, which reads the member from the run's stored spec."""
        return self.member_override or member.model or self.member_default

    def fallbacks_for_member(self, member: Member) -> list[str]:
        """`--fallback-model` > the member's own fallbacks > the team-wide ones: as for_member."""
        if self.fallback_override is not None:
            return self.fallback_override
        return self.member_fallbacks if member.fallbacks is None else member.fallbacks


class ModelSource(StrEnum):
    """Where a model came from, in precedence order."""

    FLAG = "--model"
    TEAM_FILE = "team file"
    ENVIRONMENT = "TEAMCTL_MODEL"
    PROVIDER_KEY = "provider key"
    OFFLINE = "offline model"


def pick_model(
    flag: str | None, team_file: str | None, settings: Settings
) -> tuple[str, ModelSource]:
    """The one precedence for any role: --model > the team file > TEAMCTL_MODEL > the small
    default of the first provider with a key set > the built-in offline model."""
    for model, source in (
        (flag, ModelSource.FLAG),
        (team_file, ModelSource.TEAM_FILE),
        (settings.model, ModelSource.ENVIRONMENT),
    ):
        if model:
            return model, source
    for var in PROVIDER_KEY_VARS:
        if var in settings.provider_keys:
            return DEFAULT_MODEL_FOR_KEY[var], ModelSource.PROVIDER_KEY
    # Imported here: the offline model's tables cost every read-only verb (`status`) its
    # start-up, and only a run with no model configured needs its name.
    from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL

    return OFFLINE_MODEL, ModelSource.OFFLINE


def choose_models(
    team: TeamFile,
    model_flag: str | None,
    api_base_flag: str | None,
    settings: Settings,
    fallback_flags: Sequence[str] = (),
) -> tuple[ModelChoice, ModelSource]:
    """Every role's model and fallbacks and the API base, and where the team-wide default came
    from (the CLI says so on stderr when that is the offline model)."""
    default, source = pick_model(model_flag, team.model, settings)
    override = checked_fallback_flags(fallback_flags)
    planner_fallbacks = team.fallbacks if team.planner.fallbacks is None else team.planner.fallbacks
    synthesizer_fallbacks = team.synthesizer.fallbacks
    if synthesizer_fallbacks is None:  # as its model: the planner's when it has none of its own
        synthesizer_fallbacks = team.fallbacks if team.synthesizer.model else planner_fallbacks
    choice = ModelChoice(
        planner=pick_model(model_flag, team.planner.model or team.model, settings)[0],
        # As AI4J: a synthesizer without a model of its own uses the planner's.
        synthesizer=pick_model(
            model_flag, team.synthesizer.model or team.planner.model or team.model, settings
        )[0],
        member_default=default,
        member_override=model_flag,
        api_base=checked_api_base(api_base_flag, settings),
        planner_fallbacks=planner_fallbacks if override is None else override,
        synthesizer_fallbacks=synthesizer_fallbacks if override is None else override,
        member_fallbacks=team.fallbacks,
        fallback_override=override,
    )
    return choice, source


def checked_fallback_flags(flags: Sequence[str]) -> list[str] | None:
    """`--fallback-model` values (None when none was given); ConfigError for a bad one."""
    if not flags:
        return None
    try:
        return checked_fallbacks(list(flags))
    except ValueError as exc:
        raise ConfigError(f"--fallback-model: {exc}") from None


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
        raise ConfigError(
            f"{where} {quoted(value)} is not an http(s) URL; give the server's "
            "base URL, e.g. http://127.0.0.1:8000/v1"
        )
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
    """The run's workspace directory on the coordinator's host (a `local` workspace)."""
    created_ms: int
    workspace_store: WorkspaceStore = "local"
    """Where the members' files live: `workspace_dir`, or Redis (materialized per attempt)."""
    workspace_host: str | None = None
    """The host that created a `local` workspace (shared/process/hosts.py this_host): a worker on
    another host refuses the run's tasks (None: kept in Redis, or a run stored before hosts
    were recorded)."""
    hooks: list[str] = Field(default_factory=list)
    planner_queue: str = "members"
    synthesizer_queue: str = "members"
    """Where the planner's and the synthesizer's model calls run (workers hold the keys)."""
    limits: dict[str, ModelLimit] = Field(default_factory=dict)
    """The team file's provider limits per model string (workers add TEAMCTL_LIMITS)."""
    lineage: Lineage | None = None
    """The run this one replays or forks (what each task reuses is in its reuse hash)."""

    @property
    def queues(self) -> list[str]:
        """Every queue the run's jobs go to: the members', the planner's, the synthesizer's."""
        return sorted(
            {m.queue for m in self.members} | {self.planner_queue, self.synthesizer_queue}
        )

    def mcp_variables(self) -> set[str]:
        """The worker environment variables the members' MCP servers read."""
        return {
            name for m in self.members for server in m.mcp_servers for name in server.variables()
        }

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
