"""Starting `rq worker` processes through a fork server (worker/fork_server.py): the requests
it answers and the handle of a worker it forked, driven like the Popen of an executed one.

Opt-in: when `TEAMCTL_WORKER_FORK_SERVER` names the Unix socket of a running server (owned by this
user), `teamctl run --workers N` and the local worker pool ask it for their workers instead of
executing `python -m rq.cli worker`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, Field, TypeAdapter
from teamctl.shared.errors import InfraError

FORK_SERVER_ENV = "TEAMCTL_WORKER_FORK_SERVER"
"""The socket of a fork server this user runs; unset, workers are executed as usual."""
POLL_INTERVAL_S = 0.05


class SpawnRequest(BaseModel):
    """Fork a worker running `rq <argv>` with this environment and working directory; its
    stdout and stderr are the file descriptor sent with the request."""

    op: Literal["spawn"] = "spawn"
    argv: list[str]
    env: dict[str, str]
    cwd: str
    new_session: bool = False


class StatusRequest(BaseModel):
    """How a worker forked by this server ended; None while it runs."""

    op: Literal["status"] = "status"
    pid: int


REQUEST: TypeAdapter[SpawnRequest | StatusRequest] = TypeAdapter(
    Annotated[SpawnRequest | StatusRequest, Field(discriminator="op")])


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
        if self.returncode is None:
            reply = _ask(self.socket_path, StatusRequest(pid=self.pid).model_dump_json())
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


def spawn(socket_path: str, argv: list[str], env: Mapping[str, str], log_fd: int, *,
          new_session: bool = False) -> ForkedWorker:
    """Have the server fork a worker running `rq <argv>`, writing to `log_fd`."""
    request = SpawnRequest(argv=argv, env=dict(env), cwd=os.getcwd(), new_session=new_session)
    reply = _ask(socket_path, request.model_dump_json(), fds=[log_fd])
    return ForkedWorker(socket_path, SpawnReply.model_validate_json(reply).pid)


def _ask(socket_path: str, request: str, fds: list[int] | None = None) -> bytes:
    """Send one request, return the server's reply; InfraError when the server is not there or
    refused the request."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(socket_path)
            socket.send_fds(client, [request.encode() + b"\n"], fds or [])
            client.shutdown(socket.SHUT_WR)
            reply = read_all(client)
    except OSError as exc:
        raise InfraError(
            f"no worker fork server answers at {socket_path} ({exc.strerror or exc}): start one "
            f"with `{sys.executable} -m teamctl.worker.fork_server {socket_path}`, or unset "
            f"{FORK_SERVER_ENV} to start workers as separate programs") from exc
    if reply.startswith(b'{"refused"'):
        refused = RefusedReply.model_validate_json(reply).refused
        raise InfraError(f"the worker fork server at {socket_path} refused: {refused}")
    return reply


def read_all(connection: socket.socket) -> bytes:
    chunks = []
    while chunk := connection.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
