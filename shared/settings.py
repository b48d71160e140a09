"""teamctl's process-level configuration: one model, read from the environment once at an edge.

The CLI builds it once per command and the RQ job entry point once per job; everything below
them receives it (or the one field it needs) as an argument, and nothing else reads the
environment for configuration. Process plumbing stays where it is: the parent-pid watch
(shared/process/parent_watch.py), the worker's preload marker (worker/jobs.py), RQ's own `RQ_*`
variables and litellm's cost-map switch (shared/agent/llm.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from teamctl.shared.errors import ConfigError
from teamctl.shared.providers.limits_config import (
    LIMITER_OFF,
    LIMITS_FORMAT,
    ModelLimit,
    parse_limits,
)
from teamctl.shared.text import shorten

PROVIDER_KEY_SUFFIX = "_API_KEY"
"""litellm reads a provider's key from `<PROVIDER>_API_KEY` (OPENAI_API_KEY, ...)."""
VALUE_CHARS = 80
"""How much of a bad value an error message repeats."""


def default_state_dir(xdg_state_home: Path | None) -> Path:
    """The XDG state dir's `teamctl` (`~/.local/state/teamctl` when XDG_STATE_HOME is unset)."""
    return (xdg_state_home or Path.home() / ".local" / "state") / "teamctl"


class Settings(BaseModel):
    """What the environment configures; an empty variable counts as unset, as it always has.

    Built by load_settings(); arguments (tests) go by the variables' names: `TEAMCTL_MODEL=`,
    and win over the environment. A plain model reading `os.environ` itself: pydantic-settings
    did the same for these few variables, and importing it cost every CLI verb ~20-40 ms."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    redis_url: str | None = Field(None, validation_alias="REDIS_URL")
    """The Redis to use when no --redis-url is given; None: the embedded server."""
    model: str | None = Field(None, validation_alias="TEAMCTL_MODEL")
    """The team-wide model when neither --model nor the team file names one."""
    api_base: str | None = Field(None, validation_alias="TEAMCTL_API_BASE")
    """The OpenAI-compatible endpoint when no --api-base is given."""
    team: str = Field("default", validation_alias="TEAMCTL_TEAM")
    """The persistent team the `teamctl team` verbs act on when no -t/--team is given."""
    xdg_state_home: Path | None = Field(None, validation_alias="XDG_STATE_HOME")
    state_dir: Path = Field(
        default_factory=lambda data: default_state_dir(data["xdg_state_home"]),
        validation_alias="TEAMCTL_STATE_DIR",
    )
    """Where the embedded Redis, workspaces and worker logs live; in `model_fields_set` only
    when TEAMCTL_STATE_DIR named it."""
    worker_outage_s: float = Field(
        60.0, gt=0, le=604_800, allow_inf_nan=False, validation_alias="TEAMCTL_REDIS_OUTAGE_S"
    )
    """How long a worker rides out a Redis it cannot reach (RQ's own client included) before
    it exits; runs bound their own calls by their redis_outage_s option."""
    worker_nice: int = Field(10, ge=0, le=19, validation_alias="TEAMCTL_WORKER_NICE")
    """The niceness a worker takes once preloaded (worker/priority.py), its jobs with it: on a
    busy host the coordinator, Redis and a user's commands go first; 0 keeps the start's."""
    workspace_store: Literal["auto", "local", "redis"] = Field(
        "auto", validation_alias="TEAMCTL_WORKSPACE_STORE"
    )
    """Where a new run's or team's workspace files live: `local`, a directory on this host
    (workers on other hosts refuse its tasks and turns); `redis`, in Redis, for workers on hosts
    that share no disk; `auto`, local only when no other host can reach the Redis at all (a unix
    socket, as the embedded server's), else redis: every TCP URL, loopback included."""
    otlp_endpoint: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """Where OpenTelemetry data goes (OTLP/HTTP); set, it turns tracing on (shared/tracing.py)."""
    otlp_traces_endpoint: str | None = Field(
        None, validation_alias="OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    """Where traces go, over OTEL_EXPORTER_OTLP_ENDPOINT; set, it turns tracing on too."""
    otel_sdk_disabled: str | None = Field(None, validation_alias="OTEL_SDK_DISABLED")
    """`true` turns tracing off whatever the endpoints say (OpenTelemetry's own switch)."""
    otel_traces_exporter: str | None = Field(None, validation_alias="OTEL_TRACES_EXPORTER")
    """`none` turns tracing off; `otlp` (the default) is the only other value teamctl takes."""
    otlp_timeout: str | None = Field(None, validation_alias="OTEL_EXPORTER_OTLP_TIMEOUT")
    """How long one export may take, retries included (the SDK reads it; teamctl only notes
    that it is set, else bounds exports by shared/tracing.py's EXPORT_TIMEOUT_S)."""
    otel_service_name: str | None = Field(None, validation_alias="OTEL_SERVICE_NAME")
    """The service the spans of this process name; each kind of process has its default."""
    limits: str | None = Field(None, validation_alias="TEAMCTL_LIMITS")
    """Provider limits this worker knows of, `MODEL=rpm:N,tpm:N;...`
    (shared/providers/limits_config.py): the lowest of these, the team file's and what providers
    announce applies."""
    provider_keys: frozenset[str] = frozenset()
    """The names (never the values) of the `*_API_KEY` variables that are set: litellm reads
    the keys itself, teamctl only needs to know which providers have one."""

    @field_validator("limits")
    @classmethod
    def _limits_parse(cls, text: str | None) -> str | None:
        if text is not None:
            try:
                parse_limits(text)
            except ConfigError as exc:
                raise ValueError(f"write {LIMITS_FORMAT}") from exc
        return text

    @property
    def shared_limits(self) -> bool:
        """Whether calls wait for shared provider slots (TEAMCTL_LIMITS=off: they do not)."""
        return (self.limits or "").strip().lower() != LIMITER_OFF

    @property
    def model_limits(self) -> dict[str, ModelLimit]:
        """TEAMCTL_LIMITS parsed (checked when the settings were loaded)."""
        return parse_limits(self.limits) if self.limits else {}

    @property
    def traces_wanted(self) -> bool:
        """Whether the OTEL_* variables ask for traces: an endpoint, not disabled, exported."""
        if (self.otel_sdk_disabled or "").strip().lower() == "true":
            return False
        if (self.otel_traces_exporter or "").strip().lower() == "none":
            return False
        return bool(self.otlp_endpoint or self.otlp_traces_endpoint)

    @property
    def state_dir_from_env(self) -> bool:
        """Whether TEAMCTL_STATE_DIR chose the state dir (error messages name it then)."""
        return "state_dir" in self.model_fields_set

    @model_validator(mode="before")
    @classmethod
    def _environment(cls, data: Any) -> Any:
        """Under the arguments: each field's variable (by its exact name) when set and not
        empty, and the names of the provider keys that are set."""
        given = dict(data) if isinstance(data, Mapping) else {}
        names = {
            info.validation_alias
            for info in cls.model_fields.values()
            if isinstance(info.validation_alias, str)
        }
        found: dict[str, Any] = {name: os.environ[name] for name in names if os.environ.get(name)}
        found["provider_keys"] = frozenset(
            name
            for name, value in os.environ.items()
            if name.endswith(PROVIDER_KEY_SUFFIX) and value
        )
        return {**found, **given}


def load_settings() -> Settings:
    """The Settings of this process's environment; a value that does not parse is a
    ConfigError (exit 2) naming the variable."""
    try:
        return Settings()
    except ValidationError as exc:
        raise settings_error(exc) from exc


def settings_error(exc: ValidationError) -> ConfigError:
    """One line: which environment variable, its value, what is wrong, how to fix it."""
    first = exc.errors()[0]
    name = ".".join(str(part) for part in first["loc"])
    value = shorten(str(first.get("input")), VALUE_CHARS)
    return ConfigError(
        f"{name}={value!r} in the environment: {first['msg']}; "
        f"set {name} to a valid value or unset it"
    )
