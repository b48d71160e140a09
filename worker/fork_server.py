"""A preloaded process that forks `rq worker` processes on request, so a host that starts many
short-lived workers (the test suite starts about sixty) pays litellm's import once, not per worker.

Opt-in: when `TEAMCTL_WORKER_FORK_SERVER` names the Unix socket of a running server (owned by this
user), `teamctl run --workers N` and the local worker pool ask it for their workers instead of
executing `python -m rq.cli worker` (shared/process/fork_server_client.py). A forked worker runs the
same RQ command line with the environment, working directory and log file it was given; it differs
from an executed one in what /proc shows (its command line and initial environment are the server's)
and in its parent (the server), so the watch that stops a run's workers after a `kill -9` of the run
does not apply. Start one with `python -m teamctl.worker.fork_server SOCKET`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import sys
import traceback
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

REQUEST_MAX_BYTES = 1 << 20
REAP_INTERVAL_S = 0.1
REQUEST_TIMEOUT_S = 10.0


def preload() -> None:
    """Import what every worker imports, without the worker settings module: that one reads
    each worker's own environment when the forked worker imports it."""
    import rq.cli.cli  # noqa: F401
    import teamctl.worker.jobs  # noqa: F401
    import teamctl.worker.rq_bootstrap  # noqa: F401
    import teamctl.worker.teams.turn  # noqa: F401
    from teamctl.shared.agent.litellm_warmup import warm_up
    from teamctl.shared.agent.llm import load_litellm
    from teamctl.shared.agent.mcp_tools import preload_sdk

    warm_up(load_litellm())
    preload_sdk()


def serve(socket_path: Path) -> None:
    """Answer spawn and status requests on `socket_path` until SIGTERM; on the way out, kill by
    pid the workers still running."""
    exit_codes: dict[int, int] = {}
    children: set[int] = set()
    listener = _listen(socket_path)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopping.append(signum))
    listener.settimeout(REAP_INTERVAL_S)  # between requests, reap the workers that exited
    print("ready", flush=True)
    try:
        while not stopping:
            with contextlib.suppress(TimeoutError, InterruptedError):
                _answer(listener, children, exit_codes)
            _reap(children, exit_codes)
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        socket_path.unlink(missing_ok=True)


def _listen(socket_path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # only this user may ask: a request carries the worker's secrets
    try:
        listener.bind(str(socket_path))
    finally:
        os.umask(old_mask)
    listener.listen(16)
    if stat.S_IMODE(socket_path.stat().st_mode) & 0o077:
        raise RuntimeError(f"{socket_path} is open to other users")
    return listener


def _answer(listener: socket.socket, children: set[int], exit_codes: dict[int, int]) -> None:
    connection, _ = listener.accept()
    connection.settimeout(REQUEST_TIMEOUT_S)
    with connection:
        if peer_uid(connection) != os.getuid():
            return
        data, fds, _flags, _address = socket.recv_fds(connection, REQUEST_MAX_BYTES, 1)
        try:
            data += read_all(connection)
            reply = _carry_out(data, fds, children, exit_codes, close=[listener, connection])
        except (ValidationError, OSError) as exc:  # a bad request ends that request only
            reply = RefusedReply(refused=str(exc).splitlines()[0]).model_dump_json()
        finally:
            for fd in fds:
                os.close(fd)
        connection.sendall(reply.encode())


def _carry_out(
    data: bytes,
    fds: list[int],
    children: set[int],
    exit_codes: dict[int, int],
    close: list[socket.socket],
) -> str:
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
        _become_worker(request, fds[0], close=close)
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


def _become_worker(request: SpawnRequest, log_fd: int, close: list[socket.socket]) -> None:
    """In the forked child: take the request's environment, directory and output, then run
    RQ's command line as `python -m rq.cli` would; never return into the server's loop."""
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
        sys.argv = ["rq", *request.argv]
        # What `python -m rq.cli` would have started with: a command that lacks teamctl's
        # classes starts itself again from it (rq_bootstrap), not from the server's command.
        sys.orig_argv = [sys.executable, "-m", "rq.cli", *request.argv]
        sys.path[0] = request.cwd  # what `python -m` puts first: the directory it started in
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


if __name__ == "__main__":
    preload()
    serve(Path(sys.argv[1]))
