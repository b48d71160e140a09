"""MCP servers' tools for one attempt, through the official `mcp` SDK (the worker's side).

The SDK is async and the agent loop is sync: an `McpHub` runs one event loop on a daemon thread,
with one holder task per server that enters the SDK's `Client` and leaves it (anyio requires both
in one task) when the hub closes. Tool calls are coroutines submitted to that loop with a timeout.
A hub lives in one process and never crosses a fork: in a worker's MCP keeper for a session kept
warm across a run's attempts (worker/mcp_warm), else in the RQ work-horse of one attempt, which
stops its servers when it ends. A server that died is started again by the next call, once.

A stdio server runs in the workspace with a minimal environment (as the `bash` tool: HOME
a private directory of the hub's, outside the workspace, and git's command-running settings
pinned) in a session of its own, from an absolute path outside the workspace (a member's
write_file must never change what runs with the server's `env:` secrets); its stderr is drained
into a 64 KiB tail. Closing stops it (the SDK closes its stdin, then signals its process group)
and then SIGKILLs what is left of the group. A job killed outright cannot do that: the server
is started with a parent-death signal (DIE_WITH_PARENT), so it dies with the job. A server
that will not start, or will not list its tools in time, is a ConfigError with its stderr tail
(the task fails); a call that fails, times out or answers isError is a TOOL_ERROR result the
model reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, TextIO

from teamctl.shared.agent.mcp_caches import package_cache_env
from teamctl.shared.agent.mcp_config import (
    ENV_PREFIX,
    McpServer,
    inside,
    offered_name,
    resolved_values,
    tool_filter,
)
from teamctl.shared.agent.python_tools import result_text
from teamctl.shared.agent.tool_names import TOOL_NAME
from teamctl.shared.agent.tools import TOOL_CALL_ID, Toolbox
from teamctl.shared.errors import ConfigError, ToolFailed
from teamctl.shared.process.pids import pid_alive
from teamctl.shared.redis.url_secrets import shown_url
from teamctl.shared.text import shorten
from teamctl.shared.workspace.directory import tool_env
from teamctl.shared.workspace.private_home import PrivateHome

if TYPE_CHECKING:  # the SDK's HTTP client, imported by a worker only when it starts a server
    import httpx2

log = logging.getLogger(__name__)
STDERR_TAIL_CHARS = 2000
"""How much of a server's stderr a start failure quotes."""
STDERR_KEEP_BYTES = 64 * 1024
"""How much of a server's stderr is kept (the rest is read and dropped) for its whole life."""
STDERR_DRAIN_S = 2.0
"""How long a start failure waits for the stderr of a stopped server to be read to its end
(bounded: a process the server left behind may hold it open)."""
DESCRIBE_CHARS = 500
"""Longest exception text quoted in an error (a server's, which may echo a model's input)."""
CLOSE_TIMEOUT_S = 10.0
"""Bounds the wait for every server to stop (the SDK's own shutdown escalates within ~6 s)."""
CALL_GRACE_S = 5.0
"""Beyond a call's own timeout, how long the caller waits for the loop to notice it."""
DEATH_WAIT_S = 1.0
"""How long a failed call waits for its server's process to finish exiting, to tell a server
that died (started again) from one that failed the call and lives on."""


def preload_sdk() -> None:
    """Import the SDK's client now (~0.8 s), e.g. in a preloading RQ worker parent, so that the
    forked jobs inherit it; importing starts no thread and opens nothing, so it is fork-safe.
    Sessions and their event loop stay per attempt."""
    import mcp.shared._httpx_utils  # noqa: F401


class McpToolError(ToolFailed):
    """The server answered the call with isError: the tool's own failure."""


class McpCallFailed(ToolFailed):
    """The call got no answer: the server failed, went away or broke the protocol."""


class McpTimeout(ToolFailed):
    """The call did not answer within mcp_call_timeout_s."""


class McpRedirectRefused(ToolFailed):
    """An HTTP server redirected a request to another origin: not followed."""


class _ListTimeout(Exception):
    """The server started and handshook, but tools/list took longer than mcp_list_timeout_s."""


@dataclass(frozen=True)
class ListedTool:
    """One tool as its server lists it (and as the run's cache keeps it)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    """The server says the tool changes nothing (its readOnlyHint annotation)."""
    idempotent: bool = False
    """The server says a repeated call changes nothing more (its idempotentHint annotation)."""

    @property
    def safe_to_repeat(self) -> bool:
        """Whether a call a crash left in doubt may run again: the server says it is read-only
        or idempotent (hints, which the server's author vouches for)."""
        return self.read_only or self.idempotent

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "read_only": self.read_only,
            "idempotent": self.idempotent,
        }


@dataclass
class _Running:
    """A started server: its client (used on the loop only) and what stopping it takes."""

    server: McpServer
    client: Any
    tools: list[ListedTool]
    stop: asyncio.Event
    pgids: list[int]
    """Process groups of a stdio server (its pid: it leads a session of its own)."""
    holder: concurrent.futures.Future[None] | None = None
    stderr: StderrTail | None = None
    """A stdio server's stderr, kept for its whole life (quoted when it dies)."""


class OriginGuard:
    """Keeps an HTTP server's requests, and so its headers (`env:` secrets among them), on the
    origin (scheme, host, port) of its url. The SDK's client follows redirects within the
    origin only since mcp 2.2, and every redirect before: this does not rely on either. Its
    client follows nothing itself; a request for another origin is refused before it is sent,
    and a redirect to one is noted (`refused`) so that the failure it causes names it."""

    def __init__(self, server: McpServer) -> None:
        import httpx2

        self.server = server
        self.origin = httpx2.URL(str(server.url)).origin
        self.refused: str | None = None
        """Where the last redirect to another origin pointed (shown without userinfo, query
        or fragment), until the next call clears it."""

    def install(self, client: httpx2.AsyncClient) -> None:
        """Guard `client`: it follows no redirect itself, and checks every request it sends
        and every response it gets."""
        client.follow_redirects = False
        client.event_hooks = {"request": [self._check_request], "response": [self._note_redirect]}

    async def _check_request(self, request: httpx2.Request) -> None:
        if request.url.origin != self.origin:
            self.refused = _shown(request.url)
            raise McpRedirectRefused(self.refusal("a request"))

    async def _note_redirect(self, response: httpx2.Response) -> None:
        if not response.has_redirect_location:
            return
        try:
            target = response.request.url.join(response.headers["location"])
            if target.origin != self.origin:
                self.refused = _shown(target)
        except ValueError:  # a Location that is no URL: nothing is sent there either
            return

    def refusal(self, what: str) -> str:
        """Why `what` (a call, the start) failed: a redirect to another origin, not followed."""
        secrets = [
            key for key, value in self.server.headers.items() if value.startswith(ENV_PREFIX)
        ]
        kept = (
            f" with its headers ({', '.join(secrets)} from the worker's environment)"
            if secrets
            else ""
        )
        url = shown_url(str(self.server.url))
        return (
            f"MCP server {self.server.name!r} redirected {what} to {self.refused}, another "
            f"origin than its url {url!r}: teamctl sends a server's requests"
            f"{kept} only to its url's origin, so it was not followed; if that is the "
            "intended server, give its address as the server's url"
        )


def _shown(url: httpx2.URL) -> str:
    """A URL a server chose, for an error: its address alone (shown_url), bounded."""
    return shorten(shown_url(str(url)), DESCRIBE_CHARS)


@dataclass(frozen=True)
class McpTimeouts:
    """The run's mcp_*_timeout_s options."""

    start_s: float
    list_s: float
    call_s: float


class StderrTail:
    """A stdio server's stderr: a pipe that a thread drains for the server's life, keeping its
    last STDERR_KEEP_BYTES (a file would grow as long as the server writes). `writer` is what
    the server is given; close it once the server started (`close_writer`)."""

    def __init__(self, keep_bytes: int = STDERR_KEEP_BYTES) -> None:
        read_fd, write_fd = os.pipe()  # not inheritable: only the server gets the write end
        self.writer: TextIO = os.fdopen(write_fd, "w", encoding="utf-8")
        self._keep_bytes = keep_bytes
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._drain, args=(read_fd,), name="mcp-stderr", daemon=True
        )
        self._reader.start()

    def _drain(self, read_fd: int) -> None:
        """Read until every writer is gone (the server and what it started exited)."""
        try:
            while chunk := os.read(read_fd, 65536):
                with self._lock:
                    self._kept += chunk
                    del self._kept[: -self._keep_bytes]
        finally:
            os.close(read_fd)

    def close_writer(self) -> None:
        """Drop this process's write end: the server keeps its own, and EOF comes with it."""
        self.writer.close()

    def kept(self) -> bytes:
        with self._lock:
            return bytes(self._kept)

    def tail(self, max_chars: int = STDERR_TAIL_CHARS) -> str:
        """The end of what a stopped server wrote, once read to its end (or STDERR_DRAIN_S)."""
        self.close_writer()
        self._reader.join(STDERR_DRAIN_S)
        return self.kept().decode("utf-8", errors="replace")[-max_chars:].strip()


IDEMPOTENCY_META = "teamctl/idempotency_key"
"""The `_meta` field of a tools/call request that names the call for idempotency."""


class McpSessions(Protocol):
    """What a member's MCP tools call: a hub of the attempt's own (McpHub) or the worker's warm
    sessions (worker/mcp_warm/client.py)."""

    def start(self, server: McpServer) -> list[ListedTool]: ...

    def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class McpHub:
    """MCP sessions on an event loop thread of their own (one attempt's, or one warm session's
    in a worker's MCP keeper); `close` stops every server. Use as a context manager."""

    def __init__(
        self,
        workspace: Path,
        timeouts: McpTimeouts,
        call_key_prefix: str = "",
        package_caches: Path | None = None,
    ) -> None:
        self.workspace = workspace
        self.timeouts = timeouts
        self.package_caches = package_caches
        """Where stdio servers keep what npx and uvx download (shared/agent/mcp_caches.py)."""
        self.call_key_prefix = call_key_prefix
        """`run:task` (`team:member`): with the tool call's id, the idempotency key each call
        carries in its request's `_meta` (IDEMPOTENCY_META), the same when a crash makes the
        step run again from its recorded reply."""
        self._home = PrivateHome.create(workspace)
        self.home = self._home.path
        """HOME of the stdio servers (0700, outside the workspace), removed by `close`."""
        try:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="mcp-loop", daemon=True
            )
            self._thread.start()
        except BaseException:  # no hub to close: its home must not outlive it
            self._home.remove()
            raise
        self._running: dict[str, _Running] = {}
        self._servers: dict[str, McpServer] = {}
        """Every server started once, by name (one that died and would not start again is
        no longer running, but a later call tries again)."""
        self._guards: dict[str, OriginGuard] = {}
        """The HTTP servers' origin guards, by server name."""

    def __enter__(self) -> McpHub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, server: McpServer) -> list[ListedTool]:
        """Start (or connect to) `server` and list its tools; ConfigError with the server's
        stderr tail when it will not start or list in time."""
        if server.name in self._running:
            return self._running[server.name].tools
        stderr = StderrTail()
        try:
            ready: concurrent.futures.Future[_Running] = concurrent.futures.Future()
            ended = threading.Event()
            holder = asyncio.run_coroutine_threadsafe(
                self._hold(server, stderr.writer, ready, ended), self._loop
            )
            try:
                # The holder's own timeouts answer first; this only bounds a stuck shutdown.
                running = ready.result(
                    timeout=self.timeouts.start_s + self.timeouts.list_s + CLOSE_TIMEOUT_S
                )
            except BaseException as exc:
                # Whatever ended the wait (the server's failure, our timeout, Ctrl-C), the
                # holder is cancelled and unwinds, stopping the server: none is left behind.
                holder.cancel()
                # Not holder.result(): a cancelled future answers before the task unwound.
                ended.wait(CLOSE_TIMEOUT_S)
                raise self._start_failure(server, exc, stderr) from None
        finally:
            stderr.close_writer()
        running.holder = holder
        running.stderr = stderr
        self._running[server.name] = running
        self._servers[server.name] = server
        return running.tools

    def pid(self, server: str) -> int | None:
        """The process id of a started stdio server (None for an HTTP one)."""
        pgids = self._running[server].pgids
        return pgids[0] if pgids else None

    def alive(self, server: str) -> bool:
        """Whether a started server's session still holds: its holder runs and, for a stdio
        server, its process has not exited."""
        running = self._running.get(server)
        if running is None or running.holder is None or running.holder.done():
            return False
        return all(_running_process(pid) for pid in running.pgids[:1])

    def stderr_tail(self, server: str) -> str:
        """The end of what a started stdio server wrote to its stderr so far."""
        running = self._running.get(server)
        kept = running.stderr.kept() if running and running.stderr else b""
        return kept.decode("utf-8", "replace")[-STDERR_TAIL_CHARS:].strip()

    def _died(self, server: str) -> bool:
        """Whether a server whose call failed is dead, waiting up to DEATH_WAIT_S for it to
        finish exiting: its pipe closes (failing the call) before its process has exited. An
        HTTP server has no process here: its session ended or it did not."""
        running = self._running.get(server)
        if running is None or not running.pgids:
            return not self.alive(server)
        deadline = time.monotonic() + DEATH_WAIT_S
        while self.alive(server):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)  # no event says a process of the SDK's has exited; /proc does
        return True

    def restart(self, server: str) -> list[ListedTool]:
        """Stop a started server (what is left of it) and start it again; its tools."""
        running = self._running.pop(server, None)
        if running is not None:
            self._stop([running])
        return self.start(self._servers[server])

    def _start_failure(
        self, server: McpServer, exc: BaseException, stderr: StderrTail
    ) -> BaseException:
        """What `start` raises for `exc`: a ConfigError saying why the server did not start,
        or `exc` itself when it is no error of the server's (Ctrl-C, SystemExit)."""
        if isinstance(_leaf(exc), _ListTimeout):  # raised inside the SDK's task group
            return ConfigError(
                self._start_error(
                    server,
                    f"answered the handshake but did not list its tools within "
                    f"mcp_list_timeout_s={self.timeouts.list_s:g}",
                    stderr,
                )
            )
        if isinstance(exc, (TimeoutError, concurrent.futures.TimeoutError)):
            return ConfigError(
                self._start_error(
                    server,
                    f"did not start and list its tools within "
                    f"mcp_start_timeout_s={self.timeouts.start_s:g} and "
                    f"mcp_list_timeout_s={self.timeouts.list_s:g}",
                    stderr,
                )
            )
        if isinstance(exc, ConfigError):  # no such command, a header's variable is not set
            return exc
        guard = self._guards.get(server.name)
        if isinstance(exc, Exception) and guard is not None and guard.refused:
            return ConfigError(guard.refusal("its start"))
        if isinstance(exc, Exception):
            # The SDK's: a process that exited, a refused connection.
            return ConfigError(
                self._start_error(server, f"did not start ({_describe(exc)})", stderr)
            )
        return exc

    def _start_error(self, server: McpServer, what: str, stderr: StderrTail) -> str:
        where = f"`{' '.join(server.command)}`" if server.command else shown_url(str(server.url))
        tail = stderr.tail()
        return f"MCP server {server.name!r} ({where}) {what}" + (
            f"; its stderr ends:\n{tail}" if tail else ""
        )

    async def _hold(
        self,
        server: McpServer,
        stderr: TextIO,
        ready: concurrent.futures.Future[_Running],
        ended: threading.Event,
    ) -> None:
        """Enter the server's client, list its tools, hand them over, and hold the session
        until told to stop (entering and leaving in this one task, as anyio requires); `ended`
        once the session is left, its server stopped."""
        try:
            await self._hold_session(server, stderr, ready)
        finally:
            ended.set()

    async def _hold_session(
        self, server: McpServer, stderr: TextIO, ready: concurrent.futures.Future[_Running]
    ) -> None:
        pgids: list[int] = []
        try:
            async with contextlib.AsyncExitStack() as stack:
                stack.callback(_kill_groups, pgids)  # runs after the SDK's own shutdown
                # asyncio.timeout, not wait_for: the client must be entered in this task.
                async with asyncio.timeout(self.timeouts.start_s):
                    client = await self._connect(stack, server, stderr, pgids)
                try:
                    async with asyncio.timeout(self.timeouts.list_s):
                        tools = await _list_all(client)
                except TimeoutError:
                    raise _ListTimeout from None  # so the error says which step was slow
                running = _Running(server, client, tools, asyncio.Event(), pgids)
                ready.set_result(running)
                await running.stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning(
                    "MCP server %s: closing its session failed: %s", server.name, _describe(exc)
                )

    async def _connect(
        self, stack: contextlib.AsyncExitStack, server: McpServer, stderr: TextIO, pgids: list[int]
    ) -> Any:
        """The SDK's Client for `server`, entered on `stack` (which will leave it)."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        if server.command:
            transport: Any = _stdio_transport(
                server, self.workspace, self._stdio_env(), stderr, pgids
            )
        else:
            refused = server.clear_header_refusal()
            if refused:  # checked when the team was loaded; any host may write a spec
                raise ConfigError(refused)
            headers = resolved_values(server.headers, server.name, "header")
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            guard = self._guards[server.name] = OriginGuard(server)
            guard.install(http)
            transport = streamable_http_client(str(server.url), http_client=http)
        return await stack.enter_async_context(Client(transport, cache=None))

    def _stdio_env(self) -> dict[str, str]:
        """What a stdio server starts with before its own `env:` values: the minimal one, and
        where npx and uvx keep their downloads."""
        caches = {}
        if self.package_caches and inside(str(self.package_caches), self.workspace):
            log.warning(  # what a member's file tools write would run in the next server
                "MCP package caches %s are inside the workspace %s: not used",
                self.package_caches,
                self.workspace,
            )
        elif self.package_caches:
            try:
                caches = package_cache_env(self.package_caches)
            except OSError as exc:  # the server still runs, downloading into its HOME
                log.warning("MCP package caches not created: %s", exc)
        return _minimal_env(self.home) | caches

    def call(
        self, server: str, tool: str, arguments: dict[str, Any], call_key: str | None = None
    ) -> Any:
        """Call `tool` of a started server: its CallToolResult; McpTimeout or McpCallFailed
        when no answer came. A server that died is started again once and the call made once
        more (with the same idempotency key). `call_key` names the call (default: this hub's
        prefix and the tool call's id)."""
        if call_key is None and self.call_key_prefix:
            call_key = f"{self.call_key_prefix}:{TOOL_CALL_ID.get()}"
        try:
            return self._call_once(server, tool, arguments, call_key)
        except McpCallFailed as failure:
            if server not in self._servers or not self._died(server):
                raise
            log.warning(
                "MCP server %s died during %s (%s); starting it again. Its stderr ends: %s",
                server,
                tool,
                failure,
                self.stderr_tail(server),
            )
            try:
                self.restart(server)
            except ConfigError as exc:
                raise McpCallFailed(
                    f"MCP server {server!r} died during {tool} and did not start again: "
                    f"{shorten(str(exc), STDERR_TAIL_CHARS)}"
                ) from exc
            return self._call_once(server, tool, arguments, call_key)

    def _call_once(
        self, server: str, tool: str, arguments: dict[str, Any], call_key: str | None
    ) -> Any:
        if server not in self._running:
            raise McpCallFailed(f"MCP server {server!r} is not running")
        client = self._running[server].client
        guard = self._guards.get(server)
        if guard is not None:
            guard.refused = None
        timeout_s = self.timeouts.call_s
        meta = {IDEMPOTENCY_META: call_key} if call_key else None
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(client.call_tool(tool, arguments, meta=meta), timeout_s), self._loop
        )
        try:
            return future.result(timeout=timeout_s + CALL_GRACE_S)
        except (TimeoutError, concurrent.futures.TimeoutError):
            future.cancel()
            self._check_redirect(guard, tool)
            raise McpTimeout(
                f"MCP server {server!r} did not answer {tool} within "
                f"{timeout_s:g}s (mcp_call_timeout_s)"
            ) from None
        except Exception as exc:
            self._check_redirect(guard, tool)
            raise McpCallFailed(
                f"MCP server {server!r} failed on {tool}: {_describe(exc)}"
            ) from exc

    def _stop(self, servers: list[_Running]) -> None:
        """Stop `servers`' sessions, then kill what is left of their process groups."""
        for running in servers:
            self._loop.call_soon_threadsafe(running.stop.set)
        holders = [r.holder for r in servers if r.holder]
        concurrent.futures.wait(holders, timeout=CLOSE_TIMEOUT_S)
        for running in servers:
            _kill_groups(running.pgids)  # whatever outlived a shutdown that timed out

    @staticmethod
    def _check_redirect(guard: OriginGuard | None, tool: str) -> None:
        """McpRedirectRefused when a redirect to another origin is why the call failed."""
        if guard is not None and guard.refused:
            raise McpRedirectRefused(guard.refusal(f"the call of {tool}"))

    def close(self) -> None:
        """Stop every server (stdio ones with their process groups), then the loop thread."""
        if self._loop.is_closed():
            return
        self._stop(list(self._running.values()))
        self._home.remove()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()


async def _list_all(client: Any) -> list[ListedTool]:
    """Every tool of the server, page by page."""
    tools: list[ListedTool] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += [
            ListedTool(
                t.name,
                t.description or "",
                dict(t.input_schema),
                read_only=bool(t.annotations and t.annotations.read_only_hint),
                idempotent=bool(t.annotations and t.annotations.idempotent_hint),
            )
            for t in page.tools
        ]
        cursor = page.next_cursor
        if not cursor:
            return tools


@contextlib.asynccontextmanager
async def _stdio_transport(
    server: McpServer, workspace: Path, env: dict[str, str], stderr: TextIO, pgids: list[int]
) -> Any:
    """The SDK's stdio transport for `server` in the workspace, noting the process group the
    server leads (the SDK starts it in a session of its own) so that it can be killed."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    command = server.command or []
    executable = _executable(server.name, command[0], workspace)
    params = StdioServerParameters(
        command=sys.executable,
        args=[*DIE_WITH_PARENT, str(os.getpid()), executable, *command[1:]],
        cwd=str(workspace),
        env=env | resolved_values(server.env, server.name, "env"),
    )
    before = _session_children()
    async with stdio_client(params, errlog=stderr) as streams:
        pgids += sorted(_session_children() - before)
        yield streams


DIE_WITH_PARENT = (
    "-I",
    "-S",
    "-c",
    """
import os, signal, sys
try:  # a Python built without ctypes, or no prctl (not Linux): the server runs unguarded
    import ctypes
    prctl = getattr(ctypes.CDLL(None), "prctl", None)
except Exception:
    prctl = None
if prctl is not None:
    prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv[1]):
        os._exit(1)  # the job died before the signal was armed
os.execv(sys.argv[2], sys.argv[2:])
""",
)
"""What a stdio server is started through: it arms the parent-death signal (SIGKILL once the
job's MCP loop thread, its parent, is gone: a SIGKILLed job cannot stop its servers, which run
in a session of their own), then execs the server, which keeps it (`python -I -S`: ~25 ms)."""


def _executable(server: str, command: str, workspace: Path) -> str:
    """The absolute path the server runs: an absolute command as given (loading a team file
    made its relative paths absolute), a bare name from the worker's PATH or beside its Python
    (a server installed in the worker's virtualenv, since the server gets a minimal PATH).
    Never the workspace's: members write files there, and the server gets `env:` secrets."""
    if "/" in command and not os.path.isabs(command):
        raise ConfigError(
            f"MCP server {server!r}: command {command!r} is a relative path, "
            "which workers never look up in the workspace; give it in a team "
            "file (relative to the file's directory) or as an absolute path"
        )
    if "/" in command:
        found = shutil.which(command)
        if not found:
            raise ConfigError(
                f"MCP server {server!r}: command {command!r} is not an executable "
                "file on this worker; install it at that path on every worker "
                "host and check its x bit"
            )
    else:
        found = shutil.which(command) or shutil.which(
            command, path=str(Path(sys.executable).parent)
        )
        if not found:
            raise ConfigError(
                f"MCP server {server!r}: command {command!r} is not on this "
                "worker's PATH; install it where the workers run"
            )
    found = os.path.abspath(found)  # a relative PATH entry: the worker's directory, as checked
    if inside(found, workspace):
        raise ConfigError(
            f"MCP server {server!r}: command {command!r} is {found}, inside the "
            "workspace, where members write files; install the server outside "
            "it and name that path"
        )
    return found


def _minimal_env(home: Path) -> dict[str, str]:
    """What the `bash` tool gets (the worker's own environment holds REDIS_URL and API keys),
    with HOME `home`. PYTHONSAFEPATH: `python -m server` must not import a module a member wrote
    in the workspace (its working directory) instead of the installed one."""
    return tool_env(home) | {"PYTHONSAFEPATH": "1"}


def _running_process(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc: whether it exists at all
        return pid_alive(pid)


def _session_children() -> set[int]:
    """Children of this process that lead a session of their own (a stdio server: the SDK
    starts it with start_new_session), read from /proc; empty where there is none."""
    me = os.getpid()
    found = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/stat", encoding="ascii", errors="replace") as f:
                    fields = f.read().rpartition(")")[2].split()
                pid = int(entry.name)
                if int(fields[1]) == me and int(fields[3]) == pid:  # ppid, session id
                    found.add(pid)
    return found


def _kill_groups(pgids: Iterable[int]) -> None:
    """SIGKILL each process group; one already gone is fine."""
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def _leaf(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio's), or the exception itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    """An exception as one phrase; exception groups (anyio's) by their first leaf."""
    exc = _leaf(exc)
    text = shorten(str(exc), DESCRIBE_CHARS)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def call_result_text(result: Any, max_chars: int) -> str:
    """A CallToolResult as the model reads it: its text content, else its structured content
    as JSON; McpToolError when the server answered isError."""
    parts = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        else:
            parts.append(f"[{kind or 'content'}: {getattr(block, 'mime_type', '')}]".rstrip())
    text = "\n".join(parts)
    if not parts and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    if result.is_error:  # the Toolbox caps it at max_chars, as every error of this tool
        raise McpToolError(text or "the tool reported an error")
    return result_text(text, max_chars)


def add_mcp_tools(
    toolbox: Toolbox,
    hub: McpSessions,
    server: McpServer,
    tools: list[ListedTool],
    entries: Iterable[str],
    max_chars: int,
) -> list[str]:
    """Offer the tools of a started server that the member's entries allow, as
    `<server>__<tool>` with the server's schema (safe to repeat when its annotations say it is
    read-only or idempotent); the names added. ConfigError when a name is
    taken or an entry names a tool the server does not have; a tool whose name no provider
    accepts is left out (logged)."""
    allowed = tool_filter(entries, server.name)
    _check_filter(server.name, allowed, tools)
    added = []
    for tool in tools:
        if allowed is not None and tool.name not in allowed:
            continue
        name = offered_name(server.name, tool.name)
        if not TOOL_NAME.fullmatch(name):
            log.warning(
                "MCP tool %s of %s left out: %r is not a valid function name",
                tool.name,
                server.name,
                name,
            )
            continue
        if name in toolbox.names:
            raise ConfigError(
                f"MCP tool {name!r} clashes with another tool of this member; "
                "rename the server or the other tool"
            )
        toolbox.add_raw(
            name,
            tool.description or f"{tool.name} of MCP server {server.name}.",
            _parameters(tool.input_schema),
            _bound(hub, server.name, tool.name, max_chars),
            max_chars=max_chars,
            safe_to_repeat=tool.safe_to_repeat,
        )
        added.append(name)
    return added


def _check_filter(server: str, allowed: set[str] | None, tools: list[ListedTool]) -> None:
    """ConfigError (the attempt fails, as for a server that will not start) when the member's
    entries name a tool `server` did not list: a typo would otherwise leave it without it."""
    listed = [tool.name for tool in tools]
    missing = sorted((allowed or set()) - set(listed))
    if missing:
        raise ConfigError(
            f"MCP server {server!r} has no tool {', '.join(map(repr, missing))} (mcp entry "
            f"{', '.join(f'{server}:{name}' for name in missing)}); its tools: "
            f"{shorten(', '.join(listed), DESCRIBE_CHARS) or 'none'}; fix the member's mcp "
            "entry"
        )


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """The server's input schema, with the `properties` providers insist on."""
    return {"type": "object", "properties": {}} | schema


def _bound(
    hub: McpSessions, server: str, tool: str, max_chars: int
) -> Callable[[dict[str, Any]], str]:
    def call(arguments: dict[str, Any]) -> str:
        return call_result_text(hub.call(server, tool, arguments), max_chars)

    return call
