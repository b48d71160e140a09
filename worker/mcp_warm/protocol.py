"""What a job and its worker's MCP keeper say to each other over the keeper's unix socket: one
JSON object a line each way, a request then its reply."""

from __future__ import annotations

import json
import socket
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from teamctl.shared.agent.mcp_config import McpServer

KEEPER_ENV = "TEAMCTL_MCP_KEEPER"
"""The keeper's socket, named by the worker to the jobs it forks."""
WORKSPACES_DIR = "workspaces"
"""Beside the keeper's socket: the copies of workspaces kept in Redis that warm servers use."""
MAX_LINE_BYTES = 64 * 1024 * 1024
"""Longest message either side reads (a tool result is capped far below, by the job)."""


class Scope(BaseModel):
    """What a warm session belongs to and ends with: a planned run, or a team (by its creation
    time too: a team deleted and created again under its name is another team)."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["run", "team"]
    id: str
    created_ms: int = 0


class OpenRequest(BaseModel):
    """Start `server` for `scope` in `workspace`, or reuse the session that already runs it."""

    op: Literal["open"] = "open"
    scope: Scope
    workspace: str
    server: McpServer
    entries: list[str] = Field(default_factory=list)
    """The member's (teammate's) MCP grants: sessions of other grants are other sessions."""
    start_s: float
    list_s: float
    call_s: float
    idle_s: float


class CallRequest(BaseModel):
    """Call `tool` in an open session."""

    op: Literal["call"] = "call"
    session: str
    tool: str
    arguments: dict[str, Any]
    call_key: str | None = None


class Reply(BaseModel):
    """The keeper's answer: what was asked for, or an error of one `kind`."""

    session: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    pid: int | None = None
    """The stdio server's process (for tests and benchmarks)."""
    reused: bool = False
    result: dict[str, Any] | None = None
    error_kind: Literal["", "config", "timeout", "failed", "redirect", "gone", "refused"] = ""
    error: str = ""


def send(sock: socket.socket, message: BaseModel) -> None:
    """Write `message` as one line."""
    sock.sendall(message.model_dump_json().encode() + b"\n")


def receive(reader: Any) -> dict[str, Any] | None:
    """The next line of `reader` (a socket's binary file) as JSON; None at its end."""
    line = reader.readline(MAX_LINE_BYTES)
    if not line:
        return None
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a message must be a JSON object")
    return value
