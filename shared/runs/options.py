"""A planned run's options: the team file's `[options]`, AI4J's defaults plus teamctl's own."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from teamctl.shared.agent.model_names import DEFAULT_FALLBACK_AFTER_S, DEFAULT_FALLBACK_COOLDOWN_S
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.retention import DEFAULT_RETENTION_S, MAX_RETENTION_S
from teamctl.shared.workspace.caps import (
    DEFAULT_FILE_MAX_BYTES,
    DEFAULT_WORKSPACE_MAX_BYTES,
    DEFAULT_WORKSPACE_MAX_FILES,
    MAX_FILE_MAX_BYTES,
    MAX_WORKSPACE_MAX_BYTES,
    MAX_WORKSPACE_MAX_FILES,
    FileCaps,
)

DEFAULT_MAX_ROUNDS = 64


MAX_DURATION_S = 7 * 24 * 3600
"""Upper bound of every timeout and TTL option: a week is beyond any sane run, and keeps
deadlines and Redis expiries (milliseconds) far from overflow."""


REMOVED_OPTIONS = {
    "allow_dynamic_member_registration": "removed: a run's roster is fixed once it starts "
    "(members cannot be added to a live run; "
    "docs/guides/planned-runs.md, Run options)",
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
    """Every run option, with AI4J's defaults plus teamctl's own (docs/ai4j.md says which).

    Every number is finite and bounded above (a value out of range is a ConfigError naming the
    flag or the team file field): an infinite timeout overflowed deadlines, an infinite float
    was stored as JSON null, a huge retention made Redis refuse the EXPIRE. `<= 0` keeps its
    AI4J meaning ("the default") where it had one (max_concurrency, max_rounds,
    message_history_limit).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    parallel_dispatch: bool = True
    """Dispatch up to max_concurrency ready tasks per round; off: one task per round."""
    max_concurrency: int = Field(4, le=1024)
    """Most tasks one round dispatches (with parallel_dispatch); 0 or less means 1."""
    max_rounds: int = Field(DEFAULT_MAX_ROUNDS, le=10_000)
    """Dispatch rounds (waves, with eager dispatch) before the run stops; 0 or less means 64."""
    continue_on_member_error: bool = True
    """Keep dispatching after a task fails (its dependents are blocked); off: the first failure
    stops dispatch."""
    fail_on_unknown_member: bool = False
    """A planned task naming no member of the team fails; off: the first member runs it."""
    broadcast_on_planner_failure: bool = True
    """A planner reply with no usable task gives every member one task on the objective; off:
    the run fails."""
    enable_message_bus: bool = True
    """Members, the coordinator and people exchange messages on the run's bus; off: nothing is
    published (the message tools say the bus is off) and task inputs carry no history."""
    include_original_objective_in_dispatch: bool = True
    """A member's task input carries the run's objective."""
    include_task_context_in_dispatch: bool = True
    """A member's task input carries the planner's context for the task."""
    include_message_history_in_dispatch: bool = True
    """A member's task input carries the messages delivered to it so far (message_history_limit)."""
    message_history_limit: int = Field(20, le=10_000)
    """Most messages a task input carries (the latest); 0 or less: all of them."""
    require_plan_approval: bool = False
    """The plan waits for a person's approval before any task runs (`teamctl approve`/`reject`,
    or `run --approve-plan`)."""
    enable_member_team_tools: bool = True
    """Members get the team tools (messages, task board, handoff, release)."""
    dispatch: Literal["eager", "barrier"] = "eager"
    """`eager` refills a free slot as soon as a task ends (the refill joins the round still
    running); `barrier` waits for the whole round before the next."""
    heartbeat_ttl_s: float = Field(30.0, gt=0, le=MAX_DURATION_S)
    """A claim whose heartbeat is this old is reclaimed and its task dispatched again."""
    max_attempts: int = Field(3, ge=1, le=100)
    """Claims of one task before it fails "claim expired after N attempts"."""
    member_max_steps: int = Field(16, ge=1, le=1_000_000)
    """Model calls per member session before the task fails "member exceeded N steps"."""
    max_tokens: int | None = Field(None, ge=1, le=10**12)
    """Tokens (prompt and completion) the whole run may use; None: no limit."""
    max_cost_usd: float | None = Field(None, gt=0, le=1_000_000)
    """Dollars the whole run may spend (models with no known price count $0); None: no limit."""
    timeout_s: float = Field(1800.0, gt=0, le=MAX_DURATION_S)
    """How long this coordinator drives the run before stopping it (a resume starts afresh)."""
    model_timeout_s: float = Field(120.0, gt=0, le=MAX_DURATION_S)
    """How long one model call may take before it is retried or fails."""
    model_max_retries: int = Field(3, ge=0, le=100)
    """Retries of a model call that failed for a passing reason (a timeout, a rate limit, a 5xx
    answer), with backoff."""
    fallback_after_s: float = Field(DEFAULT_FALLBACK_AFTER_S, ge=0, le=MAX_DURATION_S)
    """How long a call with a fallback model left waits for its model's paused provider
    account (after a 429) before it moves on to the next model."""
    fallback_cooldown_s: float = Field(DEFAULT_FALLBACK_COOLDOWN_S, ge=0, le=MAX_DURATION_S)
    """After a model's retries were spent, how long calls that have another model skip it
    (shared by every worker, per model and API base); then one call probes it again."""
    max_message_bytes: int = Field(65536, ge=1, le=16 * 1024 * 1024)
    """Largest message on the bus, every field counted; a larger one is refused (a tool error
    for a member, exit 2 for `teamctl send`)."""
    dependency_output_chars: int = Field(4000, ge=0, le=1_000_000)
    """How much of each dependency's output a task input carries; longer ones are cut."""
    bus_max_messages: int = Field(100_000, ge=1, le=10_000_000)
    """Messages the run's bus keeps (a tenth more before it is cut back), never dropping unread
    ones."""
    lease_ttl_s: float = Field(15.0, gt=0, le=MAX_DURATION_S)
    """How long after its coordinator dies a run may be resumed (`teamctl resume`)."""
    redis_outage_s: float = Field(60.0, gt=0, le=MAX_DURATION_S)
    """How long every process keeps retrying through a Redis restart or failover."""
    retention_s: int = Field(DEFAULT_RETENTION_S, ge=1, le=MAX_RETENTION_S)
    """How long an ended run's keys stay in Redis."""
    journal_max_bytes: int = Field(2_000_000, ge=0, le=100_000_000)
    """Largest step journal kept per task (its model replies and tool results, as JSON), which
    a reclaimed task's next attempt replays instead of paying again; past it, the steps after
    are not recorded (a crash then repeats them). 0: no journal."""
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
    mcp_idle_s: float = Field(300.0, gt=0, le=MAX_DURATION_S)
    """How long a worker keeps a stdio MCP server's session open, unused, for the run's next
    attempts on it (it closes sooner when the run ends or the worker stops)."""
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

    @model_validator(mode="before")
    @classmethod
    def _forget_removed(cls, data: Any) -> Any:
        """Specs stored before an option was removed still load (team files are told, in
        load_team_file)."""
        if isinstance(data, dict) and REMOVED_OPTIONS.keys() & data.keys():
            return {k: v for k, v in data.items() if k not in REMOVED_OPTIONS}
        return data

    @property
    def file_caps(self) -> FileCaps:
        """The caps of the workspace when it is kept in Redis."""
        return FileCaps(
            self.workspace_file_max_bytes, self.workspace_max_bytes, self.workspace_max_files
        )

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
