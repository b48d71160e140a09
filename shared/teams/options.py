"""A persistent team's options: the team file's `[teammates]` table, stored in the team's meta."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from teamctl.shared.agent.mcp_config import check_entries, split_entry
from teamctl.shared.agent.model_names import (
    DEFAULT_FALLBACK_AFTER_S,
    DEFAULT_FALLBACK_COOLDOWN_S,
    Fallbacks,
)
from teamctl.shared.agent.tool_names import WORKSPACE_TOOLS, check_entry, is_python_tool
from teamctl.shared.providers.limits_config import ModelLimit
from teamctl.shared.workspace.caps import (
    DEFAULT_FILE_MAX_BYTES,
    DEFAULT_WORKSPACE_MAX_BYTES,
    DEFAULT_WORKSPACE_MAX_FILES,
    MAX_FILE_MAX_BYTES,
    MAX_WORKSPACE_MAX_BYTES,
    MAX_WORKSPACE_MAX_FILES,
    FileCaps,
)

GRANTABLE_BY_DEFAULT = ("read_file", "write_file", "edit_file", "list_files")
"""What the lead may give a teammate unless the team file says otherwise: the workspace tools
without `bash`."""


MAX_GRANTS = 100
"""Entries a grantable list may hold."""


class TeamOptions(BaseModel):
    """A team's options, written once when the team is created (the `meta` key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: dict[str, ModelLimit] = Field(default_factory=dict)
    """The team file's provider limits per model string (its `[limits]` table, copied here
    when the team is created from the file)."""
    max_teammates: int = Field(32, ge=1, le=1000)
    """Most teammates the team holds; a spawn past it is refused."""
    max_turn_attempts: int = Field(3, ge=1, le=100)
    """Runs of one stalled turn (its worker died) before the teammate goes idle with the error."""
    heartbeat_ttl_s: float = Field(30.0, gt=0, le=3600)
    """A turn lease not refreshed for this long is lost: reconcile reruns the turn."""
    turn_timeout_s: float = Field(1800.0, gt=0, le=86400)
    """Longest one turn job runs: no model call starts past it (idle reason `time_limit`), and
    past half of it the next turn goes to a fresh job."""
    turn_max_steps: int = Field(50, ge=1, le=1000)
    """Model calls in one turn (of a teammate or the lead) before it ends (`step_limit`)."""
    max_message_bytes: int = Field(65536, ge=64, le=1 << 24)
    """Largest message on the team's bus, every field counted; a larger one is refused."""
    model_timeout_s: float = Field(120.0, gt=0, le=3600)
    """How long one model call may take before it is retried or fails."""
    model_max_retries: int = Field(3, ge=0, le=10)
    """Retries of a model call that failed for a passing reason, with backoff."""
    fallbacks: Fallbacks = Field(default_factory=list)
    """Models the lead (`teamctl lead`) tries in order when its own cannot answer, and the
    default fallbacks of the teammates it spawns on its own model."""
    fallback_after_s: float = Field(DEFAULT_FALLBACK_AFTER_S, ge=0, le=86400)
    """How long a call with a fallback model left waits for its model's paused provider
    account before it moves on to the next model."""
    fallback_cooldown_s: float = Field(DEFAULT_FALLBACK_COOLDOWN_S, ge=0, le=86400)
    """After a model's retries were spent, how long calls that have another model skip it."""
    memory_max_messages: int = Field(400, ge=4, le=100_000)
    """Past this, a checkpoint drops the oldest whole exchanges of a teammate's (and the lead's)
    memory."""
    last_answer_chars: int = Field(200, ge=0, le=4000)
    """How much of a teammate's last answer its idle notice repeats."""
    shutdown_deadline_s: float = Field(120.0, gt=0, le=86400)
    """How long a teammate has to answer a shutdown request before it expires."""
    plan_deadline_s: float = Field(3600.0, gt=0, le=7 * 86400)
    """How long the lead has to review a plan before the request expires (then resubmit)."""
    tool_result_max_chars: int = Field(20_000, ge=100, le=10_000_000)
    """Longest result a teammate's Python or MCP tool gives its model; longer ones are cut."""
    tool_timeout_s: float = Field(120.0, gt=0, le=86400)
    """How long one Python tool call may run; then the model gets a ToolTimeout error and the
    call is abandoned (its thread can no longer refresh the turn lease)."""
    mcp_start_timeout_s: float = Field(30.0, gt=0, le=3600)
    """How long an MCP server may take to start (else the turn ends idle with the error)."""
    mcp_list_timeout_s: float = Field(30.0, gt=0, le=3600)
    """How long listing an MCP server's tools may take (else the turn ends with the error)."""
    mcp_call_timeout_s: float = Field(60.0, gt=0, le=86400)
    """How long one MCP tool call may take; a slower one is a TOOL_ERROR result."""
    mcp_idle_s: float = Field(300.0, gt=0, le=86400)
    """How long a worker keeps an MCP server's session open, unused, for the team's next turns
    on it (it closes sooner when the team is deleted or the worker stops)."""
    workspace_file_max_bytes: int = Field(DEFAULT_FILE_MAX_BYTES, ge=1, le=MAX_FILE_MAX_BYTES)
    """Largest file a workspace kept in Redis holds (TEAMCTL_WORKSPACE_STORE); a larger save is
    refused with a tool error. A local workspace has no such cap."""
    workspace_max_bytes: int = Field(DEFAULT_WORKSPACE_MAX_BYTES, ge=1, le=MAX_WORKSPACE_MAX_BYTES)
    """Most bytes a workspace kept in Redis holds there: each file's content, its path twice
    and PATH_RECORD_BYTES (512) for Redis's records of it; a deleted path's twice and
    512 until its record goes (10 minutes, or at once when a save needs the room). A save
    that would pass it is refused with a tool error naming it."""
    workspace_max_files: int = Field(DEFAULT_WORKSPACE_MAX_FILES, ge=1, le=MAX_WORKSPACE_MAX_FILES)
    """Most files a workspace kept in Redis holds; a save that would add one more is refused
    with a tool error naming it."""
    lead_tools: list[str] = Field(default_factory=list)
    """Workspace tools the lead agent (`teamctl lead`) gets in the team's workspace; `bash` only
    if listed."""
    grantable_tools: list[str] = Field(
        default_factory=lambda: list(GRANTABLE_BY_DEFAULT), max_length=MAX_GRANTS
    )
    """The tools the lead's spawn_teammate may give a teammate: workspace tools (`bash` only if
    listed) and Python tools (`package.module:function`, imported when the team is created)."""
    grantable_mcp: list[str] = Field(default_factory=list, max_length=MAX_GRANTS)
    """The MCP entries the lead may give: a server of the team's `[[mcp_servers]]` (any of its
    tools, or all) or `server:tool` (that one); none by default."""
    grantable_models: list[str] = Field(default_factory=list, max_length=MAX_GRANTS)
    """Models the lead may give a teammate besides its own (a model picks the provider, and so
    where the workers' keys go); none by default."""
    memory_max_chars: int = Field(400_000, ge=1000, le=100_000_000)
    """Past this many characters (of the messages' JSON), a checkpoint drops the oldest whole
    exchanges of a teammate's or the lead's memory, as past memory_max_messages; the newest
    exchange stays whole."""
    max_task_releases: int = Field(3, ge=0, le=100)
    """How often a team task may go back to the board unfinished (its holder ended two turns,
    or a failed turn); the next time it fails instead, so no task passes between teammates for
    ever."""
    inbox_batch_messages: int = Field(50, ge=1, le=1000)
    """Most unread messages one read_inbox answer or one step's `<inbox>` block carries (within
    tool_result_max_chars characters too); the rest wait, unread, for the next."""

    bus_max_messages: int = Field(100_000, ge=20, le=10_000_000)
    """Messages the team's bus keeps (a tenth more before it is cut back); what some reader has
    not read stays, and the lead's unread notices fold past lead_inbox_max_messages."""
    lead_inbox_max_messages: int = Field(500, ge=10, le=1000)
    """Most unread messages the lead's inbox holds: past it the oldest notices fold into one
    `inbox.summary` notice; peer and protocol messages never fold, and a teammate's message to a
    lead whose inbox is full of them is refused with a tool error."""

    @property
    def file_caps(self) -> FileCaps:
        """The caps of the workspace when it is kept in Redis."""
        return FileCaps(
            self.workspace_file_max_bytes, self.workspace_max_bytes, self.workspace_max_files
        )

    @model_validator(mode="after")
    def _lead_inbox_fits_bus(self) -> TeamOptions:
        if self.lead_inbox_max_messages > self.bus_max_messages // 2:
            raise ValueError(
                f"lead_inbox_max_messages ({self.lead_inbox_max_messages}) must be at most half "
                f"of bus_max_messages ({self.bus_max_messages}), so the lead's unread mail fits "
                "on the bus beside the teammates'; lower it or raise bus_max_messages"
            )
        return self

    @field_validator("lead_tools")
    @classmethod
    def _known_tools(cls, tools: list[str]) -> list[str]:
        unknown = [tool for tool in tools if tool not in WORKSPACE_TOOLS]
        if unknown:
            raise ValueError(
                f"unknown tool {unknown[0]!r}; available: {', '.join(WORKSPACE_TOOLS)}"
            )
        return tools

    @field_validator("grantable_tools")
    @classmethod
    def _grantable_tools(cls, tools: list[str]) -> list[str]:
        for tool in tools:
            if is_python_tool(tool):
                check_entry(tool)
            elif tool not in WORKSPACE_TOOLS:
                raise ValueError(
                    f"unknown tool {tool!r}; list workspace tools "
                    f"({', '.join(WORKSPACE_TOOLS)}) or Python tools as "
                    "'package.module:function'"
                )
        return list(dict.fromkeys(tools))

    @field_validator("grantable_mcp")
    @classmethod
    def _grantable_mcp(cls, entries: list[str]) -> list[str]:
        return list(dict.fromkeys(check_entries(entries)))

    @field_validator("grantable_models")
    @classmethod
    def _grantable_models(cls, models: list[str]) -> list[str]:
        if any(not model.strip() or len(model) > 200 for model in models):
            raise ValueError("a model is a non-empty name of at most 200 characters")
        return list(dict.fromkeys(models))

    def may_grant_mcp(self, entry: str) -> bool:
        """Whether the lead may give a teammate this MCP entry: listed as is, or its server
        listed bare (all its tools)."""
        return entry in self.grantable_mcp or split_entry(entry)[0] in self.grantable_mcp

    @property
    def tool_wait_s(self) -> float:
        """How long a turn waits for one Python tool call: tool_timeout_s, but never past the
        turn's own bound (the job would be killed first and the turn rerun, the call with it)."""
        return min(self.tool_timeout_s, self.turn_timeout_s)

    @property
    def job_timeout_s(self) -> int:
        """RQ's bound on one turn job: the turn's own bound plus a minute to end cleanly."""
        return int(self.turn_timeout_s) + 60

    # The team's budget, as a run's: every model call of its teammates and its lead counts.
    max_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens (prompt and completion) the team may use in all; None: no limit."""
    max_cost_usd: float | None = Field(None, gt=0, le=1_000_000)
    """Dollars the team may spend in all (models with no known price count $0); None: no
    limit."""
