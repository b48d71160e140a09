"""The preloaded parent teamctl forks its local workers from: one worker fork server
(worker/fork_server.py) per warm pool and per `teamctl run --workers N`, so litellm is imported
once rather than in each worker, and the workers share those pages.

The parent starts in a directory of its own with only the variables that shape what it imports
(PARENT_VARIABLES: no key, no Redis URL, no proxy that may hold a password): its /proc/PID/environ,
which its forked workers show as theirs, holds no secret, and no secret is in what it preloaded.
Each worker gets the whole environment its request gives. The parent's socket is bound here and
handed over, so a request can be sent at once and waits while the parent preloads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from teamctl.shared.process.fork_server_socket import FORK_SERVER_ENV, listen
from teamctl.shared.process.parent_watch import PARENT_PID_ENV
from teamctl.shared.process.pids import executable, process_start_ticks, still_running
from teamctl.shared.process.private_files import private_opener

PARENT_VARIABLES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONWARNINGS",
        "VIRTUAL_ENV",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "NO_PROXY",
        "no_proxy",
        "LITELLM_LOCAL_MODEL_COST_MAP",
        "LITELLM_LOG",
    }
)
"""What the parent keeps of the environment that starts it: where programs and modules are,
the locale, litellm's import-time settings; never a credential."""
PARENT_PREFIXES = ("LC_",)
POOL_LINGER_S = 30.0
"""A pool's parent exits this long after its last worker did (idle exit, `workers stop`)."""
MODULE = "teamctl.worker.fork_server"
SOCKET_DIR_PREFIX = "teamctl-workers-"
SOCKET_DIR_MAX_CHARS = 64
"""The longest temporary directory the parent's socket goes under (with its own directory and
file name the path stays within a Unix socket's 107 bytes); /tmp otherwise."""


def own_parent_wanted(environ: Mapping[str, str]) -> bool:
    """Whether teamctl forks its local workers from a preloaded parent of its own: unless
    TEAMCTL_WORKER_FORK_SERVER names another server, or `off` (each worker executed)."""
    return not environ.get(FORK_SERVER_ENV)


def parent_env(environ: Mapping[str, str], cwd: str) -> dict[str, str]:
    """The variables of `environ` the parent starts with; PYTHONPATH made absolute against
    `cwd`, since the parent starts elsewhere."""
    env = {
        name: value
        for name, value in environ.items()
        if name in PARENT_VARIABLES or name.startswith(PARENT_PREFIXES)
    }
    if env.get("PYTHONPATH"):
        entries = [os.path.join(cwd, item) for item in env["PYTHONPATH"].split(os.pathsep) if item]
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(item) for item in entries)
    return env


@dataclass(frozen=True)
class PreloadedParent:
    """A parent as the pool records it: pid, start time and program (to tell a reused pid from
    it), its socket, and `key`, a digest of the environment it started with."""

    pid: int
    start_ticks: int | None
    socket: str
    key: str = ""
    program: str | None = None

    def alive(self) -> bool:
        return still_running(self.pid, self.start_ticks, self.program)


def start_parent(
    environ: Mapping[str, str],
    log_path: Path,
    *,
    linger_s: float | None = None,
    run_pid: int | None = None,
) -> tuple[subprocess.Popen[bytes], PreloadedParent]:
    """Start a parent in its own session (a Ctrl-C in the shell spares it) with the parent's
    part of `environ`, writing to `log_path`; it exits `linger_s` after its last worker, if
    given, and with `run_pid` when that process, its parent, is gone (a run's, which must
    answer for its workers until the run stops it). Returns at once: it preloads while the
    first request waits."""
    # 0700, and short: a socket's path is at most 107 bytes, so a long $TMPDIR is passed over.
    short_tmp = len(tempfile.gettempdir()) <= SOCKET_DIR_MAX_CHARS
    directory = tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX, dir=None if short_tmp else "/tmp")
    socket_path = os.path.join(directory, "fork.sock")
    env = parent_env(environ, os.getcwd())
    if run_pid is not None:
        env[PARENT_PID_ENV] = str(run_pid)
    listener = listen(socket_path)
    try:
        with open(log_path, "ab", opener=private_opener) as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    MODULE,
                    socket_path,
                    "--listen-fd",
                    str(listener.fileno()),
                    *([] if linger_s is None else ["--linger-s", str(linger_s)]),
                    "--owns-directory",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=directory,
                start_new_session=True,
                pass_fds=[listener.fileno()],
            )
    finally:
        listener.close()
    program = executable(process.pid)
    return process, PreloadedParent(
        process.pid,
        process_start_ticks(process.pid),
        socket_path,
        program=None if program is None else str(program),
    )


def remove_socket_dir(socket_path: str) -> None:
    """Remove a parent's socket and its directory, left behind by a parent that was killed (one
    that exits removes them itself); only a directory start_parent made."""
    directory = Path(socket_path).parent
    if not directory.name.startswith(SOCKET_DIR_PREFIX):
        return
    with suppress(OSError):
        Path(socket_path).unlink(missing_ok=True)
        directory.rmdir()
