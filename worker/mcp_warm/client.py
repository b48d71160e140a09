"""A job's MCP sessions: warm ones through its worker's keeper (worker/mcp_warm/keeper.py), or a
hub of the attempt's own where none can be shared (no keeper: a job run outside a teamctl
worker). A workspace kept in Redis is copied, for servers to stay warm in, to one directory per
run (team) that the keeper owns, emptied and fetched again by each attempt (turn)."""

from __future__ import annotations

import hashlib
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Self

from teamctl.shared.agent.mcp_caches import caches_from_env
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.agent.mcp_tools import (
    CALL_GRACE_S,
    CLOSE_TIMEOUT_S,
    ListedTool,
    McpCallFailed,
    McpHub,
    McpRedirectRefused,
    McpSessions,
    McpTimeout,
    McpTimeouts,
)
from teamctl.shared.agent.tools import TOOL_CALL_ID
from teamctl.shared.errors import ConfigError
from teamctl.worker.mcp_warm.protocol import (
    KEEPER_ENV,
    WORKSPACES_DIR,
    CallRequest,
    OpenRequest,
    Reply,
    Scope,
    receive,
    send,
)

log = logging.getLogger(__name__)
ANSWER_GRACE_S = 5.0
"""Beyond the keeper's own bounds, how long a job waits for its answer."""


@dataclass(frozen=True)
class Warmth:
    """What makes a job's sessions shareable: the run (team) they belong to, its idle bound,
    and the member's grants."""

    scope: Scope
    idle_s: float
    entries: tuple[str, ...]


def kept_workspace_root(environ: Mapping[str, str], scope: Scope) -> Path | None:
    """Where `scope`'s jobs on this worker copy a workspace kept in Redis, for its MCP servers
    to stay warm in: one directory per run (team) beside the keeper's socket, in its 0700
    directory (None: the worker has no keeper, and an attempt's copy is its own)."""
    socket_path = environ.get(KEEPER_ENV)
    if not socket_path:
        return None
    digest = hashlib.sha256(scope.model_dump_json().encode()).hexdigest()[:16]
    return Path(socket_path).parent / WORKSPACES_DIR / f"{scope.kind}-{digest}"


def mcp_sessions(
    environ: Mapping[str, str],
    workspace: Path,
    timeouts: McpTimeouts,
    call_key_prefix: str,
    warmth: Warmth | None,
) -> McpSessions:
    """The job's MCP sessions: warm through the worker's keeper when `warmth` is given and the
    worker has one, else a hub of the job's own (using the worker's package caches)."""
    socket_path = environ.get(KEEPER_ENV)
    if warmth is not None and socket_path:
        try:
            return WarmSessions(socket_path, workspace, timeouts, call_key_prefix, warmth)
        except OSError as exc:  # the keeper died: the worker forks another for the next job
            log.warning("the worker's MCP keeper is unreachable (%s): servers run per attempt", exc)
    return McpHub(workspace, timeouts, call_key_prefix, package_caches=caches_from_env(environ))


class WarmSessions:
    """McpSessions kept by the worker's keeper: `close` ends this job's connection only (the
    keeper keeps the sessions for the run's next attempts)."""

    def __init__(
        self,
        socket_path: str,
        workspace: Path,
        timeouts: McpTimeouts,
        call_key_prefix: str,
        warmth: Warmth,
    ) -> None:
        self.workspace = workspace
        self.timeouts = timeouts
        self.call_key_prefix = call_key_prefix
        self.warmth = warmth
        self.sessions: dict[str, str] = {}
        """The keeper's session of each started server, by name."""
        self.pids: dict[str, int | None] = {}
        self.reused: dict[str, bool] = {}
        self._servers: dict[str, McpServer] = {}
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.connect(socket_path)
        except OSError:
            self._sock.close()
            raise
        self._reader: BinaryIO = self._sock.makefile("rb")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, server: McpServer) -> list[ListedTool]:
        """Open (start or reuse) `server`'s session; ConfigError when it will not start."""
        try:
            reply = self._open(server)
        except McpCallFailed as exc:
            raise ConfigError(str(exc)) from None
        if reply.error_kind:
            raise ConfigError(reply.error)
        self.sessions[server.name] = reply.session
        self.pids[server.name] = reply.pid
        self.reused[server.name] = reply.reused
        self._servers[server.name] = server
        return [ListedTool(**tool) for tool in reply.tools]

    def _open(self, server: McpServer) -> Reply:
        timeouts = self.timeouts
        return self._ask(
            OpenRequest(
                scope=self.warmth.scope,
                workspace=str(self.workspace),
                server=server,
                entries=list(self.warmth.entries),
                start_s=timeouts.start_s,
                list_s=timeouts.list_s,
                call_s=timeouts.call_s,
                idle_s=self.warmth.idle_s,
            ),
            timeouts.start_s + timeouts.list_s + 2 * CLOSE_TIMEOUT_S + ANSWER_GRACE_S,
            server.name,
        )

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        """Call `tool` in the server's session: its CallToolResult. A session the keeper closed
        meanwhile (idle while the model thought) is opened again and the call made there."""
        call_key = f"{self.call_key_prefix}:{TOOL_CALL_ID.get()}" if self.call_key_prefix else None
        reply = self._call(server, tool, arguments, call_key)
        if reply.error_kind == "gone":
            try:
                self.start(self._servers[server])
            except ConfigError as exc:
                raise McpCallFailed(str(exc)) from exc
            reply = self._call(server, tool, arguments, call_key)
        if reply.error_kind == "timeout":
            raise McpTimeout(reply.error)
        if reply.error_kind == "redirect":
            raise McpRedirectRefused(reply.error)
        if reply.error_kind:
            raise McpCallFailed(reply.error)
        from mcp_types import CallToolResult

        return CallToolResult.model_validate(reply.result)

    def _call(
        self, server: str, tool: str, arguments: dict[str, Any], call_key: str | None
    ) -> Reply:
        # The keeper may start the server again once (a start, a listing) before calling.
        timeouts = self.timeouts
        wait_s = 2 * timeouts.call_s + timeouts.start_s + timeouts.list_s + CLOSE_TIMEOUT_S
        return self._ask(
            CallRequest(
                session=self.sessions[server], tool=tool, arguments=arguments, call_key=call_key
            ),
            wait_s + CALL_GRACE_S + ANSWER_GRACE_S,
            server,
        )

    def _ask(self, request: OpenRequest | CallRequest, timeout_s: float, server: str) -> Reply:
        """Send `request`, wait for its reply; the keeper's silence or loss is McpCallFailed."""
        self._sock.settimeout(timeout_s)
        try:
            send(self._sock, request)
            answer = receive(self._reader)
        except TimeoutError:
            raise McpCallFailed(
                f"MCP server {server!r}: the worker's MCP keeper did not answer within "
                f"{timeout_s:g}s"
            ) from None
        except (OSError, ValueError) as exc:
            raise McpCallFailed(
                f"MCP server {server!r}: the worker's MCP keeper went away ({exc}); a "
                "later attempt gets a new one"
            ) from None
        if answer is None:
            raise McpCallFailed(
                f"MCP server {server!r}: the worker's MCP keeper went away; a later "
                "attempt gets a new one"
            )
        return Reply.model_validate(answer)

    def close(self) -> None:
        """End this job's connection; the sessions stay warm in the keeper."""
        self._reader.close()
        self._sock.close()
