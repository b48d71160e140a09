"""The worker's side of its MCP keeper (worker/mcp_warm/keeper.py): fork it, name it to the jobs,
fork it again if it died, and stop it with the worker.

The keeper is forked, not executed: it inherits the worker's preloaded MCP client, its settings
and its connection to Redis (a new client to the same server, made in the child), and it is
forked by RQ's main thread, as RQ forks its work-horses. Jobs find it through JOB_ENV: a process
forked after it inherits that environment, and one forked before (a waiting spare) is given it
with its job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from teamctl.shared.agent.mcp_caches import CACHES_ENV, caches_path, remove_caches
from teamctl.shared.agent.mcp_tools import CLOSE_TIMEOUT_S
from teamctl.shared.process.hosts import this_host
from teamctl.shared.redis.connection import same_server
from teamctl.shared.workspace.held_dirs import remove_tree
from teamctl.worker.mcp_warm.protocol import KEEPER_ENV

log = logging.getLogger(__name__)
JOB_ENV = (KEEPER_ENV, CACHES_ENV)
"""The environment through which the worker tells its jobs where the keeper and the package
caches are (unset: no keeper)."""
STOP_WAIT_S = CLOSE_TIMEOUT_S + 2.0
"""How long a stopping worker waits for its keeper to close every session (each one closes
within CLOSE_TIMEOUT_S), before killing it (its servers then die with it)."""


class KeeperProcess:
    """One worker's MCP keeper, as the worker sees it."""

    def __init__(self, conn: redis.Redis, state_dir: Path) -> None:
        self.conn = conn
        self.state_dir = state_dir
        self.pid: int | None = None
        self.directory: Path | None = None
        """The keeper's 0700 directory, with its socket."""
        self.caches: Path | None = None

    def missing(self) -> bool:
        """Whether ensure() would fork a keeper now: none runs, and this system has one."""
        if self.pid is not None and self._running():
            return False
        # Without SO_PEERCRED it could not tell the worker's jobs from other processes: none.
        return hasattr(socket, "SO_PEERCRED")

    def ensure(self, in_child: Callable[[], None] = lambda: None) -> None:
        """Fork the keeper unless it runs, calling `in_child` in it first (to close what it
        must not hold); jobs forked from now on are told where it is."""
        if not self.missing():
            return
        if self.caches is None:
            self.caches = caches_path(self.state_dir, this_host(), os.getpid())
            os.environ[CACHES_ENV] = str(self.caches)
        self._cleanup_directory()
        self.directory = Path(tempfile.mkdtemp(prefix="teamctl-mcp-"))
        path = str(self.directory / "keeper.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(16)
            pid = os.fork()
        except OSError:  # no process left: no keeper, and nothing of this try left behind
            listener.close()
            self._cleanup_directory()
            os.environ.pop(KEEPER_ENV, None)
            raise
        if pid == 0:  # the keeper
            code = 0
            try:
                in_child()
                from teamctl.worker.mcp_warm.keeper import run_keeper

                run_keeper(listener, same_server(self.conn, decode=True), self.caches)
            except BaseException:
                log.exception("MCP keeper failed")
                code = 1
            finally:
                os._exit(code)  # never the worker's own exit path (RQ's teardown, atexit)
        listener.close()  # the keeper listens: jobs connect to it, never to this process
        self.pid = pid
        os.environ[KEEPER_ENV] = path

    def stop(self) -> None:
        """Stop the keeper (it closes every session), then remove its directory and the
        worker's package caches."""
        os.environ.pop(KEEPER_ENV, None)
        if self.pid is not None and self._running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_WAIT_S
            while self._running() and time.monotonic() < deadline:
                time.sleep(0.05)  # polling a child we must reap; no event to wait on
            if self._running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, 0)
        self.pid = None
        self._cleanup_directory()
        if self.caches is not None:
            os.environ.pop(CACHES_ENV, None)
            remove_caches(self.caches)
            self.caches = None

    def _running(self) -> bool:
        """Whether the keeper still runs (reaping it if it exited)."""
        if self.pid is None:
            return False
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def _cleanup_directory(self) -> None:
        """Remove the keeper's directory, with the workspace copies in it whatever modes a
        tool left there."""
        if self.directory is not None:
            remove_tree(self.directory)
            self.directory = None
