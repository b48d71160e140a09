"""Starting `rq worker` processes through a fork server (worker/fork_server.py): the requests it
answers and the handle of a worker it forked, driven like the Popen of an executed one.

By default teamctl starts a fork server of its own for the local pool and for a run's workers
(coordinator/local_workers/preloaded_parent.py). `TEAMCTL_WORKER_FORK_SERVER` changes that: a
Unix socket of a running server (owned by this user) has `teamctl run --workers N` and the local
pool ask that one (the test suite's), and `off` has each worker executed as `python -m rq.cli
worker`. Before each request the client checks that the socket's directory is this user's alone
and that the server runs as this user: a request carries the workers' environment, and a reply
names the pids this process signals.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter
from teamctl.shared.errors import ConfigError, InfraError
from teamctl.shared.process.fork_server_socket import FORK_SERVER_ENV as FORK_SERVER_ENV
from teamctl.shared.process.fork_server_socket import NO_FORK_SERVER as NO_FORK_SERVER
from teamctl.shared.process.pids import same_process_alive

POLL_INTERVAL_S = 0.05
UNKNOWN_EXIT = 255
"""The exit status of a worker that ended after its server was gone: nobody reaped it for us."""
NOT_OURS_FIX = (
    "start your own server with "
    "`python -m teamctl.worker.fork_server SOCKET` in a "
    f"directory only you can write and point {FORK_SERVER_ENV} at it, or unset "
    f"{FORK_SERVER_ENV} to have teamctl start its own"
)
"""What to do when the socket named is not this user's own."""


class ServerGone(InfraError):
    """The server closed the connection without a reply: it exited (its lifetime was over,
    or its preload failed)."""


class SpawnRequest(BaseModel):
    """Fork a worker running `rq <argv>` with this environment and working directory; its
    stdout and stderr are the file descriptor sent with the request."""

    op: Literal["spawn"] = "spawn"
    argv: list[str]
    env: dict[str, str]
    cwd: str
    new_session: bool = False
    early: bool = False
    """Fork it as soon as what a run's first jobs need is preloaded, before the rest (the MCP
    SDK, the turn job, litellm's error path), which the worker does itself once it has handed
    its first job over: for a run's first worker, which takes the planner's job."""


class StatusRequest(BaseModel):
    """How a worker forked by this server ended; None while it runs."""

    op: Literal["status"] = "status"
    pid: int


REQUEST: TypeAdapter[SpawnRequest | StatusRequest] = TypeAdapter(
    Annotated[SpawnRequest | StatusRequest, Field(discriminator="op")]
)


class SpawnReply(BaseModel):
    pid: int


class RefusedReply(BaseModel):
    """A request the server could not carry out, and why."""

    refused: str


class StatusReply(BaseModel):
    returncode: int | None
    """Like Popen's: the exit status, or minus the signal that ended it."""


class ForkedWorker:
    """A worker forked by the server, driven like the Popen of an executed one (poll, wait,
    signals); its exit status comes from the server, its parent."""

    def __init__(self, socket_path: str, pid: int) -> None:
        self.socket_path = socket_path
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit status once it ended (from the server), None while it runs; with the
        server gone (it was killed), None while this pid runs, then UNKNOWN_EXIT."""
        if self.returncode is None:
            try:
                reply = _ask(self.socket_path, StatusRequest(pid=self.pid).model_dump_json())
            except InfraError:
                # An orphan now, which stops by itself (a zombie nobody reaps counts as gone).
                self.returncode = None if same_process_alive(self.pid, None) else UNKNOWN_EXIT
            else:
                self.returncode = StatusReply.model_validate_json(reply).returncode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(POLL_INTERVAL_S)
        return code

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(
    socket_path: str,
    argv: list[str],
    env: Mapping[str, str],
    log_fd: int,
    *,
    new_session: bool = False,
    early: bool = False,
) -> ForkedWorker:
    """Have the server fork a worker running `rq <argv>`, writing to `log_fd` (`early`: see
    SpawnRequest)."""
    request = SpawnRequest(
        argv=argv, env=dict(env), cwd=os.getcwd(), new_session=new_session, early=early
    )
    reply = _ask(socket_path, request.model_dump_json(), fds=[log_fd])
    return ForkedWorker(socket_path, SpawnReply.model_validate_json(reply).pid)


def _ask(socket_path: str, request: str, fds: list[int] | None = None) -> bytes:
    """Send one request, return the server's reply; ConfigError when the socket is not this
    user's own (nothing is sent), InfraError when the server is not there or refused."""
    _check_socket_dir(socket_path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(socket_path)
            _check_server(client, socket_path)
            socket.send_fds(client, [request.encode() + b"\n"], fds or [])
            client.shutdown(socket.SHUT_WR)
            reply = read_all(client)
    except OSError as exc:
        raise InfraError(
            f"no worker fork server answers at {socket_path} ({exc.strerror or exc}): start one "
            f"with `{sys.executable} -m teamctl.worker.fork_server {socket_path}`, "
            "or unset "
            f"{FORK_SERVER_ENV} to have teamctl start its own"
        ) from exc
    if not reply:
        raise ServerGone(
            f"the worker fork server at {socket_path} closed the connection without answering: "
            "it exited (see its log)"
        )
    if reply.startswith(b'{"refused"'):
        refused = RefusedReply.model_validate_json(reply).refused
        raise InfraError(f"the worker fork server at {socket_path} refused: {refused}")
    return reply


def _check_socket_dir(socket_path: str) -> None:
    """ConfigError unless the socket's directory is this user's and only this user may write
    it: another user who can write there can put a socket of theirs in its place."""
    directory = os.path.dirname(os.path.abspath(socket_path))
    try:
        info = os.stat(directory)
    except OSError:
        return  # no such directory: connect says no server answers there
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        problem = f"its directory {directory} belongs to uid {info.st_uid}, not to you"
    elif mode & 0o022:
        problem = f"its directory {directory} is writable by other users (mode {mode:o})"
    else:
        return
    raise ConfigError(f"{FORK_SERVER_ENV}={socket_path}: {problem}; {NOT_OURS_FIX}")


def _check_server(client: socket.socket, socket_path: str) -> None:
    """ConfigError unless the process listening on `client`'s socket runs as this user: a
    request carries the workers' environment (keys, the Redis password), and its reply names
    pids this process signals."""
    uid = peer_uid(client)
    if uid != os.getuid():
        raise ConfigError(
            f"{FORK_SERVER_ENV}={socket_path}: the process listening there runs as "
            f"uid {uid}, not as you (uid {os.getuid()}), and was sent nothing; "
            f"{NOT_OURS_FIX}"
        )


def peer_uid(connection: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED)."""
    ucred = struct.Struct("3i")
    _pid, uid, _gid = ucred.unpack(
        connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, ucred.size)
    )
    return int(uid)


def read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
