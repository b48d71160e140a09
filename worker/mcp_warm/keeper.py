"""A worker's MCP keeper: the process that holds the MCP sessions its jobs keep warm.

RQ's worker forks a fresh work-horse for every job, and nothing a horse opens outlives it. So the
worker forks one more child, the keeper, and its jobs ask it, over a unix socket, for a session
(`open`: started the first time, reused after) and for tool calls. A session belongs to one run
or team (its scope), one workspace, one server spec (command, arguments, headers and env, with a
digest of the values they read from the environment) and one member's grants: it is never shared
with another run or team, whose data a server's state may hold. The keeper closes a session once
it has been unused for its run's (team's) `mcp_idle_s`, once its run ended (its team was deleted),
and when the worker stops; a server that died is started again by the next open or call. Jobs
copy a workspace kept in Redis into a directory per scope beside the socket, so the servers they
start there can stay warm too; the keeper removes it once no session works there (the scope
ended, or its sessions went idle) and no job holds it.

Only jobs of the worker may talk to it: the socket is in a 0700 directory, and a peer must be a
child of the worker (a work-horse; what a tool starts is a grandchild, and is refused).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from pydantic import ValidationError
from teamctl.shared.agent.mcp_config import McpServer, resolved_values
from teamctl.shared.agent.mcp_tools import (
    McpCallFailed,
    McpHub,
    McpRedirectRefused,
    McpTimeout,
    McpTimeouts,
)
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys, TeamKeys
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.text import shorten
from teamctl.shared.workspace.held_dirs import remove_unheld
from teamctl.worker.mcp_warm.protocol import (
    WORKSPACES_DIR,
    CallRequest,
    OpenRequest,
    Reply,
    Scope,
    receive,
    send,
)
from teamctl.worker.parent_death import die_with_parent

log = logging.getLogger(__name__)
SWEEP_S = 0.5
"""How often the keeper looks for sessions to close."""
END_CHECK_S = 1.0
"""How often it asks Redis whether a scope's run (team) ended."""
ACCEPT_POLL_S = 0.5
"""How long an accept waits before the keeper checks whether it was told to stop."""


@dataclass
class WarmSession:
    """One server's session kept for one scope."""

    key: str
    scope: Scope
    server: McpServer
    hub: McpHub
    idle_s: float
    last_used_s: float
    busy: int = 0


class McpKeeper:
    """The warm sessions of one worker, and the requests its jobs make of them."""

    def __init__(
        self,
        conn: redis.Redis,
        allowed_parent: int,
        package_caches: Path | None,
        clock: Callable[[], float] = time.monotonic,
        workspaces: Path | None = None,
    ) -> None:
        self.conn = conn
        self.allowed_parent = allowed_parent
        """The worker's pid: only its children (its jobs) are served."""
        self.package_caches = package_caches
        self.clock = clock
        self.workspaces = workspaces
        """Where jobs copy workspaces kept in Redis, a directory per scope (client.py's
        kept_workspace_root): each is removed once no session works there."""
        self.stopping = threading.Event()
        self._sessions: dict[str, WarmSession] = {}
        self._kept_copies: dict[Scope, Path] = {}
        self._lock = threading.Lock()
        self._ended_checked_s = 0.0

    def sessions(self) -> list[WarmSession]:
        with self._lock:
            return list(self._sessions.values())

    def open(self, request: OpenRequest) -> Reply:
        """The session for `request`, started unless a live one is kept; ConfigError when the
        server will not start."""
        key = session_key(request)
        name = request.server.name
        with self._lock:  # one start at a time: a worker runs one job at a time anyway
            session = self._sessions.get(key)
            reused = session is not None and session.hub.alive(name)
            if session is not None and not reused:
                del self._sessions[key]
                log.warning(
                    "MCP server %s of %s %s died; starting it again. Its stderr ends: %s",
                    name,
                    *_of(session),
                    session.hub.stderr_tail(name),
                )
                session.hub.close()
                session = None
            self._note_kept_copy(request)  # a server that will not start leaves it too
            if session is None:
                session = self._start(key, request)
                self._sessions[key] = session
            session.last_used_s = self.clock()
            tools = session.hub.start(request.server)  # listed at its start
            return Reply(
                session=key,
                tools=[tool.as_json() for tool in tools],
                pid=session.hub.pid(name),
                reused=reused,
            )

    def _note_kept_copy(self, request: OpenRequest) -> None:
        """Remember a session's workspace that is a copy of ours, to remove with its scope."""
        workspace = Path(request.workspace)
        if self.workspaces is not None and workspace.parent == self.workspaces:
            self._kept_copies[request.scope] = workspace

    def _start(self, key: str, request: OpenRequest) -> WarmSession:
        hub = McpHub(
            Path(request.workspace),
            McpTimeouts(request.start_s, request.list_s, request.call_s),
            package_caches=self.package_caches,
        )
        try:
            hub.start(request.server)
        except BaseException:
            hub.close()
            raise
        return WarmSession(
            key, request.scope, request.server, hub, request.idle_s, last_used_s=self.clock()
        )

    def call(self, request: CallRequest) -> Reply:
        """Make a tool call in a kept session; `gone` when it was closed meanwhile."""
        with self._lock:
            session = self._sessions.get(request.session)
            if session is None:
                return Reply(error_kind="gone", error="the session was closed")
            session.busy += 1
        try:
            result = session.hub.call(
                session.server.name, request.tool, request.arguments, request.call_key
            )
            return Reply(result=result.model_dump(mode="json", by_alias=True))
        except McpTimeout as exc:
            return Reply(error_kind="timeout", error=str(exc))
        except McpRedirectRefused as exc:
            return Reply(error_kind="redirect", error=str(exc))
        except McpCallFailed as exc:
            return Reply(error_kind="failed", error=str(exc))
        finally:
            with self._lock:
                session.busy -= 1
                session.last_used_s = self.clock()

    def sweep(self) -> None:
        """Close the sessions unused for their idle bound, and those whose scope ended; remove
        the workspace copies no session works in any more (an attempt's next one makes it
        again)."""
        now = self.clock()
        ended: set[Scope] = set()
        if now - self._ended_checked_s >= END_CHECK_S:
            self._ended_checked_s = now
            ended = {scope for scope in {s.scope for s in self.sessions()} if self._ended(scope)}
        with self._lock:
            closing = [
                s
                for s in self._sessions.values()
                if not s.busy and (s.scope in ended or now - s.last_used_s >= s.idle_s)
            ]
            for session in closing:
                del self._sessions[session.key]
            still_used = {s.scope for s in self._sessions.values()}
            unused = [scope for scope in self._kept_copies if scope not in still_used]
            removing = [(scope, self._kept_copies.pop(scope)) for scope in unused]
        for session in closing:
            why = "ended" if session.scope in ended else f"idle for {session.idle_s:g}s"
            log.info("closing MCP server %s of %s %s: %s", session.server.name, *_of(session), why)
            session.hub.close()
        for scope, copy in removing:  # after the servers working in it stopped
            if not remove_unheld(copy):  # an attempt still works there: tried again next sweep
                with self._lock:
                    self._kept_copies.setdefault(scope, copy)

    def _ended(self, scope: Scope) -> bool:
        """Whether the run ended (its record is gone, or finished) or the team was deleted
        (or created again); False when Redis cannot say (the idle bound still holds)."""
        try:
            return scope_ended(self.conn, scope)
        except (redis.RedisError, OSError, ValueError) as exc:  # ValueError: a status unknown
            log.warning("MCP keeper: could not check %s %s: %s", scope.kind, scope.id, exc)
            return False

    def close_all(self) -> None:
        """Close every session (the worker stops)."""
        with self._lock:
            closing = list(self._sessions.values())
            self._sessions.clear()
        for session in closing:
            session.hub.close()

    def serve(self, listener: socket.socket) -> None:
        """Serve the jobs' connections, each on a thread of its own, until told to stop."""
        listener.settimeout(ACCEPT_POLL_S)
        while not self.stopping.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self.stopping.is_set():
                    return
                log.warning("MCP keeper: accept failed: %s", exc)
                continue
            sock.settimeout(None)
            threading.Thread(
                target=self._serve_connection, args=(sock,), name="mcp-keeper-job", daemon=True
            ).start()

    def sweep_until_stopped(self) -> None:
        """The sweeper thread's loop."""
        while not self.stopping.wait(SWEEP_S):
            try:
                self.sweep()
            except Exception:  # a bug here must not end the sweeping
                log.exception("MCP keeper: sweep failed")

    def _serve_connection(self, sock: socket.socket) -> None:
        with sock, sock.makefile("rb") as reader:
            if not self._peer_allowed(sock):
                send(sock, Reply(error_kind="refused", error="not a job of this worker"))
                return
            with contextlib.suppress(OSError):  # the job went away mid-answer
                while (message := receive(reader)) is not None:
                    send(sock, self.handle(message))

    def handle(self, message: dict[str, Any]) -> Reply:
        """Answer one request; every failure is an error reply."""
        try:
            if message.get("op") == "open":
                return self.open(OpenRequest.model_validate(message))
            return self.call(CallRequest.model_validate(message))
        except ConfigError as exc:
            return Reply(error_kind="config", error=str(exc))
        except ValidationError as exc:
            return Reply(error_kind="failed", error=f"a malformed request: {shorten(str(exc))}")
        except Exception as exc:  # a bug must reach the job's error, not only this log
            log.exception("MCP keeper: request failed")
            return Reply(error_kind="failed", error=f"{type(exc).__name__}: {shorten(str(exc))}")

    def _peer_allowed(self, sock: socket.socket) -> bool:
        """Whether the peer is a process of ours that the worker forked (one of its jobs)."""
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except (AttributeError, OSError):  # no SO_PEERCRED: the worker starts no keeper there
            return False
        pid, uid, _ = struct.unpack("3i", raw)
        return uid == os.getuid() and _parent_of(pid) == self.allowed_parent


def session_key(request: OpenRequest) -> str:
    """What makes two opens the same session: scope, workspace, the server's spec with a digest
    of the values it reads from the environment, the grants and the timeouts."""
    server = request.server
    values = {
        "env": resolved_values(server.env, server.name, "env"),
        "headers": resolved_values(server.headers, server.name, "header"),
    }
    material = {
        "scope": request.scope.model_dump(),
        "workspace": request.workspace,
        "server": server.model_dump(mode="json"),
        "values": hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest(),
        "entries": sorted(request.entries),
        "timeouts": [request.start_s, request.list_s, request.call_s],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def scope_ended(conn: redis.Redis, scope: Scope) -> bool:
    """Whether the run of `scope` ended (or is gone), or its team was deleted (or is another
    team of the same name now). Read from the keys themselves: this module serves runs and
    teams alike, and imports neither's store."""
    if scope.kind == "run":
        status = conn.hget(RunKeys(scope.id).state, "status")
        return status is None or RunStatus(status).finished
    meta = conn.get(TeamKeys(scope.id).meta)
    return meta is None or json.loads(meta).get("created_ms", 0) != scope.created_ms


def _of(session: WarmSession) -> tuple[str, str]:
    return session.scope.kind, session.scope.id


def _parent_of(pid: int) -> int | None:
    """The parent of process `pid`, read from /proc (None when it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def run_keeper(listener: socket.socket, conn: redis.Redis, caches: Path | None) -> None:
    """The keeper child's life, right after the worker forked it: its own session (a Ctrl-C
    meant for the worker is not its), death with the worker, SIGTERM to stop."""
    worker = os.getppid()
    os.setsid()
    die_with_parent(worker)  # its servers die with it, each armed the same way
    workspaces = Path(listener.getsockname()).parent / WORKSPACES_DIR
    keeper = McpKeeper(conn, worker, caches, workspaces=workspaces)
    signal.signal(signal.SIGTERM, lambda *_: keeper.stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(
        target=keeper.sweep_until_stopped, name="mcp-keeper-sweep", daemon=True
    ).start()
    try:
        keeper.serve(listener)
    finally:
        keeper.stopping.set()
        keeper.close_all()
