"""MCP servers as a team file configures them (`[[mcp_servers]]`, a member's `mcp = [...]`).

Only configuration lives here: the coordinator validates team files with it and must never
import the MCP SDK nor start a server. The worker's side is mcp_tools.py.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.hosts import is_loopback_host
from teamctl.shared.redis.url_secrets import redacted

SEPARATOR = "__"
"""Between the server's name and the tool's in the name the model sees (`git__git_log`)."""
SERVER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*(_[A-Za-z0-9-]+)*", re.ASCII)
"""Letters, digits, '-' and single '_' (never '__', the separator), starting with a letter."""
MAX_SERVER_NAME_CHARS = 32
MCP_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}", re.ASCII)
"""A tool's name as the MCP specification allows it (what an entry `server:tool` may name)."""
ENV_PREFIX = "env:"
"""A header or env value `env:NAME` is read from the worker's environment."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
TEAMCTL_SECRETS = frozenset({"REDIS_URL", "RQ_REDIS_URL", "REDISCLI_AUTH"})
"""Variables that hold the Redis URL or password (the embedded server's is in its URL, and in
REDISCLI_AUTH for redis-cli): whoever reads them owns every run and team."""
TEAMCTL_PREFIX = "TEAMCTL_"


def teamctl_secret(name: str) -> bool:
    """Whether variable `name` is teamctl's own (its Redis, its settings): never an MCP value."""
    upper = name.upper()
    return upper in TEAMCTL_SECRETS or upper.startswith(TEAMCTL_PREFIX)


def secret_refusal(where: str, name: str) -> str:
    """Why `where` (a value, or a server's field) may not read variable `name`, teamctl's own:
    said the same by the team file's check and the worker's."""
    return (
        f"{where}: ${name} is teamctl's own (its Redis and settings) and never goes to an "
        "MCP server; give the server a variable of its own"
    )


def _env_ref(value: str) -> str:
    """A header or env value: `env:NAME` must name a variable that is not teamctl's own."""
    if value.startswith(ENV_PREFIX):
        name = value[len(ENV_PREFIX) :]
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{value!r}: write 'env:NAME' with NAME an environment variable name")
        if teamctl_secret(name):
            raise ValueError(secret_refusal(repr(value), name))
    return value


EnvValue = Annotated[str, AfterValidator(_env_ref)]
"""A literal header or env value, or `env:NAME` (checked where it is given, so that an error
names the field: `mcp_servers.0.headers.Authorization`)."""


def private_destination(url: str) -> bool:
    """Whether a header sent to `url` stays private: https, or a loopback host."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return True
    return is_loopback_host(parts.hostname or "")


class McpServer(BaseModel):
    """One MCP server: a command started over stdio in the workspace, or a streamable HTTP
    URL; `headers` (HTTP) and `env` (stdio) values `env:NAME` come from the worker's
    environment when the server is started."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    command: list[str] | None = Field(None, min_length=1)
    url: str | None = None
    headers: dict[str, EnvValue] = Field(default_factory=dict)
    env: dict[str, EnvValue] = Field(default_factory=dict)

    def variables(self) -> set[str]:
        """The worker's environment variables this server reads (its `env:NAME` values)."""
        return {
            value[len(ENV_PREFIX) :]
            for value in (*self.headers.values(), *self.env.values())
            if value.startswith(ENV_PREFIX)
        }

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if len(name) > MAX_SERVER_NAME_CHARS or not SERVER_NAME.fullmatch(name):
            raise ValueError(
                f"MCP server name {name!r}: use up to {MAX_SERVER_NAME_CHARS} "
                "letters, digits, '-' or single '_', starting with a letter"
            )
        if name == "team" or name.startswith("team_"):
            raise ValueError(
                f"MCP server name {name!r}: names starting with 'team' would "
                "give tools the team tools' 'team_' prefix; choose another"
            )
        return name

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"url {redacted(url)!r}: give the server's http(s) endpoint, e.g. "
                    "http://127.0.0.1:8765/mcp"
                )
        return url

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of command (stdio) "
                "or url (streamable HTTP)"
            )
        if self.url and self.env:
            raise ValueError(
                f"MCP server {self.name!r}: env is for a command's process; an "
                "HTTP server takes headers"
            )
        if self.command and self.headers:
            raise ValueError(
                f"MCP server {self.name!r}: headers are for an HTTP server; a command takes env"
            )
        refused = self.clear_header_refusal()
        if refused:
            raise ValueError(refused)
        return self

    def clear_header_refusal(self) -> str | None:
        """Why a header of this server may not be sent (an `env:` value to a URL that is
        neither https nor loopback), or None: said the same by the team file's check and the
        worker's."""
        exposed = self.exposed_header()
        if exposed is None:
            return None
        return (
            f"MCP server {self.name!r}: headers.{exposed} reads the worker's environment "
            f"but url {redacted(self.url or '')!r} is neither https nor loopback "
            "(127.0.0.1, ::1, localhost), so it would cross the network in clear; use an "
            "https URL"
        )

    def exposed_header(self) -> str | None:
        """A header carrying an `env:` value to a URL that is neither https nor loopback."""
        if self.url is None or private_destination(self.url):
            return None
        return next(
            (key for key, value in self.headers.items() if value.startswith(ENV_PREFIX)), None
        )

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


def split_entry(entry: str) -> tuple[str, str | None]:
    """A member's `mcp` entry as (server, tool): `git` is every tool of git, `git:git_log` one."""
    server, colon, tool = entry.partition(":")
    return server, (tool if colon else None)


def check_entries(entries: Iterable[str]) -> list[str]:
    """A member's `mcp` entries if each is `server` or `server:tool`; ValueError otherwise."""
    entries = list(entries)
    for entry in entries:
        server, tool = split_entry(entry)
        if not SERVER_NAME.fullmatch(server) or (
            tool is not None and not MCP_TOOL_NAME.fullmatch(tool)
        ):
            raise ValueError(
                f"mcp entry {entry!r}: write a server's name ('git') for all its "
                "tools, or 'server:tool' ('git:git_log') for one"
            )
    return entries


def servers_for(entries: Iterable[str], servers: Iterable[McpServer]) -> list[McpServer]:
    """The configured servers a member's entries name, in the team file's order; ValueError
    naming an entry whose server is not configured."""
    by_name = {server.name: server for server in servers}
    wanted = []
    for entry in entries:
        name, _ = split_entry(entry)
        if name not in by_name:
            known = ", ".join(by_name) or "none is configured"
            raise ValueError(
                f"mcp entry {entry!r} names no [[mcp_servers]] entry ({known}); "
                "add the server or fix the name"
            )
        wanted.append(name)
    return [server for name, server in by_name.items() if name in wanted]


def tool_filter(entries: Iterable[str], server: str) -> set[str] | None:
    """The tools a member may use of `server`: None for all (a bare entry), else their names."""
    chosen: set[str] = set()
    for entry in entries:
        name, tool = split_entry(entry)
        if name == server:
            if tool is None:
                return None
            chosen.add(tool)
    return chosen


def offered_name(server: str, tool: str) -> str:
    """The name the model sees for `tool` of `server`."""
    return f"{server}{SEPARATOR}{tool}"


def resolved_values(
    values: Mapping[str, str], server: str, what: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """`headers` or `env` with each `env:NAME` replaced by the worker's variable; ConfigError
    (the task's error) naming a variable that is not set, or one of teamctl's own (checked
    again here: any host that reaches Redis can write a run's spec)."""
    environ = os.environ if environ is None else environ
    resolved = {}
    for key, value in values.items():
        if value.startswith(ENV_PREFIX):
            name = value[len(ENV_PREFIX) :]
            if teamctl_secret(name):
                raise ConfigError(
                    secret_refusal(f"MCP server {server!r}: {what} {key} = {value!r}", name)
                )
            if name not in environ:
                raise ConfigError(
                    f"MCP server {server!r}: {what} {key} reads ${name}, which "
                    "is not set in this worker's environment; set it where the "
                    "workers run"
                )
            value = environ[name]
        resolved[key] = value
    return resolved


def resolved_command(server: McpServer, base_dir: Path) -> McpServer:
    """`server` with a relative command path (`./bin/serve`, `bin/serve`) made absolute against
    `base_dir` (the team file's directory): what the workers run is fixed when a person's
    configuration is loaded, never looked up in a workspace. A bare name (`npx`) stays, for
    each worker's PATH."""
    if not server.command or "/" not in server.command[0] or os.path.isabs(server.command[0]):
        return server
    absolute = str(base_dir.absolute() / server.command[0])
    return server.model_copy(update={"command": [absolute, *server.command[1:]]})


def inside(path: str | Path, directory: str | Path) -> bool:
    """Whether `path` lies in `directory`, as written or once symlinks are followed."""
    written = Path(os.path.normpath(os.path.abspath(path)))
    real = Path(os.path.realpath(path))
    return any(
        candidate.is_relative_to(root)
        for candidate in (written, real)
        for root in (
            Path(os.path.normpath(os.path.abspath(directory))),
            Path(os.path.realpath(directory)),
        )
    )
