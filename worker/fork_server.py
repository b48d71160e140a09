"""A preloaded process that forks `rq worker` processes on request, so the workers a host starts pay
litellm's import once, not each, and share the pages of what was imported (copy-on-write).

How teamctl starts its local workers by default (coordinator/local_workers/preloaded_parent.py):
the warm pool has one such parent, which exits once it has had no worker for `--linger-s`
seconds, and a `teamctl run --workers N` one of its own, which exits when that run is gone. The
test suite starts one for all its workers and names its socket in `TEAMCTL_WORKER_FORK_SERVER`
(shared/process/fork_server_client.py). A forked worker runs RQ's command line with the
environment, working directory and log file it was asked for, and shows that command in /proc
(shared/process/process_title.py); its /proc/PID/environ is still the parent's start-up
environment, which holds no secret (preloaded_parent.parent_env). A worker of a run watches the
parent instead of the run, and the parent watches the run: after a `kill -9` of the run the
parent exits, and its workers each finish their job and exit (shared/process/parent_watch.py).
It preloads in two parts (worker/preload.py): a request marked early (a run's first worker) that
waits once the first part is done is forked then, the others after the whole preload.
Start one by hand with `python -m teamctl.worker.fork_server SOCKET`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import signal
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError
from teamctl.shared.process.fork_server_client import (
    REQUEST,
    RefusedReply,
    SpawnReply,
    SpawnRequest,
    StatusReply,
    StatusRequest,
    peer_uid,
    read_all,
)
from teamctl.shared.process.fork_server_socket import listen
from teamctl.shared.process.parent_watch import PARENT_PID_ENV, watch_parent
from teamctl.shared.process.process_title import set_command_line
from teamctl.worker.preload import DEFERRED_ENV, preload_for_planning, preload_rest

REQUEST_MAX_BYTES = 1 << 20
REAP_INTERVAL_S = 0.1
REQUEST_TIMEOUT_S = 10.0


def preload() -> None:
    """Import and prepare what every worker imports (worker/preload.py), without the worker
    settings module: that one reads each worker's own environment when the forked worker
    imports it."""
    preload_planning()
    finish_preload()


def preload_planning() -> None:
    """The part of the preload a run's first jobs need, the collector off meanwhile (it stays
    off until finish_preload): the objects made here live as long as the process, and the
    collector walking them again and again costs about a quarter of the preload."""
    gc.disable()
    preload_for_planning()
    # Frozen: a forked worker's collector never walks these objects, so it never writes their
    # gc headers and copies their pages; the workers keep sharing them with this process.
    gc.freeze()


def finish_preload() -> None:
    """The rest of the preload, then the collector on again."""
    preload_rest()
    gc.freeze()
    gc.enable()


@dataclass
class Lifetime:
    """When the server stops by itself: `linger_s` after its last worker exited (or after it
    started, if none came), and when `watched_parent`, its parent at start, is gone."""

    linger_s: float | None = None
    watched_parent: int | None = None
    idle_since: float = field(default_factory=time.monotonic)

    def orphaned(self) -> bool:
        return self.watched_parent is not None and os.getppid() != self.watched_parent

    def idle_too_long(self, children: set[int]) -> bool:
        if children:
            self.idle_since = time.monotonic()
            return False
        return self.linger_s is not None and time.monotonic() - self.idle_since >= self.linger_s


@dataclass
class Received:
    """A request read from its connection and not answered yet: its bytes, and the descriptors
    it carried (a spawn request's log file)."""

    connection: socket.socket
    data: bytes
    fds: list[int]


def serve(
    socket_path: Path,
    listener: socket.socket | None = None,
    lifetime: Lifetime | None = None,
    *,
    owns_directory: bool = False,
    children: set[int] | None = None,
    waiting: list[Received] | None = None,
) -> None:
    """Answer spawn and status requests on `socket_path` until SIGTERM or the end of its
    `lifetime`, those `waiting` already read first; on the way out, kill by pid the workers
    still running (`children`: those forked already), unless its parent is gone (they watch
    this process and finish their jobs first)."""
    lifetime = lifetime or Lifetime()
    exit_codes: dict[int, int] = {}
    children = set() if children is None else children
    listener = listener or listen(socket_path)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    listener.settimeout(REAP_INTERVAL_S)  # between requests, reap the workers that exited
    print("ready", flush=True)
    lifetime.idle_since = time.monotonic()  # the preload is not idleness: requests may wait
    try:
        for held in waiting or []:
            _answer(held, children, exit_codes, close=[listener])
        while not stopping and not lifetime.orphaned():
            with contextlib.suppress(TimeoutError, InterruptedError):
                received = _receive(listener)
                if received is not None:
                    _answer(received, children, exit_codes, close=[listener])
            _reap(children, exit_codes)
            if lifetime.idle_too_long(children):
                break
    finally:
        # Gone from the file system first: a request after this finds no server and starts one.
        socket_path.unlink(missing_ok=True)
        listener.close()
        if owns_directory:
            with contextlib.suppress(OSError):
                socket_path.parent.rmdir()
        if not lifetime.orphaned():
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def fork_early(listener: socket.socket, children: set[int]) -> list[Received]:
    """Between the two parts of the preload: fork the workers whose requests wait now and ask
    for it (a run's first worker: SpawnRequest.early), which do the rest of the preload
    themselves once they have handed a job over (worker/preload.py); the other requests
    waiting are returned, read, for serve to answer."""
    held: list[Received] = []
    listener.setblocking(False)
    try:
        while True:
            try:
                received = _receive(listener)
            except BlockingIOError:  # nothing more waits
                return held
            except (TimeoutError, InterruptedError):  # a client that sent nothing in time
                continue
            if received is None:
                continue
            try:
                request = REQUEST.validate_json(received.data)
            except ValidationError:
                request = None
            if isinstance(request, SpawnRequest) and request.early:
                _answer(received, children, {}, close=[listener], deferred=True)
            else:
                held.append(received)
    finally:
        listener.setblocking(True)


def _receive(listener: socket.socket) -> Received | None:
    """The next request on `listener`, read whole; None (its connection closed) when it comes
    from another user."""
    connection, _ = listener.accept()
    connection.settimeout(REQUEST_TIMEOUT_S)
    if peer_uid(connection) != os.getuid():
        connection.close()
        return None
    try:
        data, fds, _flags, _address = socket.recv_fds(connection, REQUEST_MAX_BYTES, 1)
    except BaseException:
        connection.close()
        raise
    try:
        data += read_all(connection)
    except OSError:  # answered as a bad request
        data = b""
    return Received(connection, data, fds)


def _answer(
    received: Received,
    children: set[int],
    exit_codes: dict[int, int],
    close: list[socket.socket],
    *,
    deferred: bool = False,
) -> None:
    """Carry out a request read and reply on its connection, then close it and its
    descriptors; a bad request ends that request only."""
    with received.connection as connection:
        try:
            reply = _carry_out(
                received.data,
                received.fds,
                children,
                exit_codes,
                close=[*close, connection],
                deferred=deferred,
            )
        except (ValidationError, OSError) as exc:
            reply = RefusedReply(refused=str(exc).splitlines()[0]).model_dump_json()
        finally:
            for fd in received.fds:
                os.close(fd)
        connection.sendall(reply.encode())


def _carry_out(
    data: bytes,
    fds: list[int],
    children: set[int],
    exit_codes: dict[int, int],
    close: list[socket.socket],
    *,
    deferred: bool = False,
) -> str:
    """The reply to one request; a spawn forks its worker (`deferred`: before the rest of the
    preload, which it then skips)."""
    request = REQUEST.validate_json(data)
    if isinstance(request, StatusRequest):
        _reap(children, exit_codes)
        return StatusReply(returncode=exit_codes.get(request.pid)).model_dump_json()
    if len(fds) != 1:
        return RefusedReply(
            refused="a spawn request carries its log file's descriptor"
        ).model_dump_json()
    pid = os.fork()
    if pid == 0:
        _become_worker(request, fds[0], close=close, deferred=deferred)
    children.add(pid)
    return SpawnReply(pid=pid).model_dump_json()


def _reap(children: set[int], exit_codes: dict[int, int]) -> None:
    """Collect every child that exited since the last call (one waitpid each, none per child
    still running)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child at all
            return
        if pid == 0:
            return
        children.discard(pid)
        exit_codes[pid] = os.waitstatus_to_exitcode(status)


def python_path_entries(value: str) -> list[str]:
    """A PYTHONPATH value's entries, absolute (against the current directory)."""
    return [os.path.abspath(item) for item in value.split(os.pathsep) if item]


def with_python_path(path: list[str], server: list[str], worker: list[str]) -> list[str]:
    """`path` (sys.path after its first entry) with the server's PYTHONPATH entries replaced by
    the worker's, first, as an interpreter started with the worker's environment has them."""
    return [*worker, *(item for item in path if not item or os.path.abspath(item) not in server)]


def _become_worker(
    request: SpawnRequest, log_fd: int, close: list[socket.socket], *, deferred: bool = False
) -> None:
    """In the forked child: take the request's environment, directory and output, then run
    RQ's command line as `python -m rq.cli` would; never return into the server's loop.
    `deferred`: forked before the rest of the preload, which its settings module then leaves to
    the worker (after its first hand-over)."""
    code = 1
    try:
        for held in close:
            held.close()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        if request.new_session:
            os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        # The server's entries resolve against its own directory, the worker's against its own.
        server_entries = python_path_entries(os.environ.get("PYTHONPATH", ""))
        os.chdir(request.cwd)
        sys.path[1:] = with_python_path(
            sys.path[1:], server_entries, python_path_entries(request.env.get("PYTHONPATH", ""))
        )
        os.environ.clear()
        os.environ.update(request.env)
        if deferred:  # the settings module reads it, and removes it before any job runs
            os.environ[DEFERRED_ENV] = "1"
        sys.argv = ["rq", *request.argv]
        # What `python -m rq.cli` would have started with: a command that lacks teamctl's
        # classes starts itself again from it (rq_bootstrap), not from the server's command.
        sys.orig_argv = [sys.executable, "-m", "rq.cli", *request.argv]
        sys.path[0] = request.cwd  # what `python -m` puts first: the directory it started in
        set_command_line(sys.orig_argv)  # `ps` shows the worker, not this server's command
        if PARENT_PID_ENV in request.env:
            # A run's worker: this server watches the run, and the worker watches this server.
            watch_parent({PARENT_PID_ENV: str(os.getppid())})
        from rq.cli.cli import main

        main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def main(argv: list[str]) -> None:
    """`python -m teamctl.worker.fork_server SOCKET [--listen-fd FD] [--linger-s S]
    [--owns-directory]`: listen, preload, then serve; a server started by a run (its
    TEAMCTL_PARENT_PID names its parent) exits when that run is gone."""
    parser = argparse.ArgumentParser(prog="python -m teamctl.worker.fork_server")
    parser.add_argument("socket", type=Path)
    parser.add_argument("--listen-fd", type=int, default=None, help="bound already, at SOCKET")
    parser.add_argument("--linger-s", type=float, default=None)
    parser.add_argument("--owns-directory", action="store_true")
    args = parser.parse_args(argv)
    from teamctl.worker.process_privacy import keep_environment_private

    # Listening first: a client's request waits in the backlog while this process preloads.
    if args.listen_fd is None:
        listener = listen(args.socket)
    else:
        listener = socket.socket(fileno=args.listen_fd)
    parent = os.environ.get(PARENT_PID_ENV, "")
    watched = int(parent) if parent.isdigit() and int(parent) == os.getppid() else None
    lifetime = Lifetime(linger_s=args.linger_s, watched_parent=watched)
    children: set[int] = set()
    waiting: list[Received] = []
    if not lifetime.orphaned():
        preload_planning()
        keep_environment_private()  # its memory holds the requests, and so the workers' secrets
        # A run's first worker, forked now, is ready for the planner's job while this process
        # imports what the run's later jobs (and the workers asked for after) use.
        waiting = fork_early(listener, children)
        finish_preload()
    keep_environment_private()
    serve(
        args.socket,
        listener,
        lifetime,
        owns_directory=args.owns_directory,
        children=children,
        waiting=waiting,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
