"""A worker's environment is kept from its user's other programs: its processes are not
dumpable, so /proc/<pid>/environ is root's (tools' programs run as the worker's user)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.injection import (
    MARKER,
    MARKER_NAME,
    MarkedWorkers,
    assert_marker_kept,
    run_marked,
)
from tests.support.llm import ScriptedLLM

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
HOLD = (
    "import sys, time\n"
    "from teamctl.worker.process_privacy import keep_environment_private\n"
    "if sys.argv[1] == 'private':\n"
    "    assert keep_environment_private()\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@contextmanager
def holder_as_nobody(mode: str) -> Iterator[int]:
    """A process of user nobody holding the marker in its environment; yields its pid."""
    process = subprocess.Popen(
        [*NOBODY, sys.executable, "-c", HOLD, mode],
        env={**os.environ, MARKER_NAME: MARKER},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        yield process.pid
    finally:
        process.kill()
        process.wait(10)


def read_as_nobody(pid: int) -> subprocess.CompletedProcess[bytes]:
    """What another program of user nobody (a tool's `cat`) reads of the holder's environment."""
    return subprocess.run(
        [*NOBODY, "cat", f"/proc/{pid}/environ"], capture_output=True, timeout=30, check=False
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as nobody")
def test_a_private_process_environment_is_unreadable_to_its_users_programs() -> None:
    with holder_as_nobody("open") as pid:
        shown = read_as_nobody(pid)
        assert shown.returncode == 0 and MARKER.encode() in shown.stdout  # what was open
    with holder_as_nobody("private") as pid:
        hidden = read_as_nobody(pid)
        assert hidden.returncode != 0 and b"Permission denied" in hidden.stderr
        assert MARKER.encode() not in hidden.stdout


def test_a_workers_job_runs_in_a_private_process(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, run_id: str, tmp_path: Path
) -> None:
    """The work-horse a tool runs in inherited the worker's privacy (worker/settings.py)."""
    (hidden,) = run_marked(
        llm,
        marked_workers,
        run_id,
        tmp_path,
        [("environment_hidden", {})],
        ["tests.pytools_fixture.tools:environment_hidden"],
    )
    assert hidden == "true"
    assert_marker_kept(
        llm,
        redis.Redis.from_url(marked_workers.redis_url),
        [tmp_path / "state", marked_workers.log_dir],
    )


POOL_CHECK = (
    "import sys\n"
    "from teamctl.shared.process.pids import process_start_ticks, still_running\n"
    "pid = int(sys.argv[1])\n"
    "print(still_running(pid, process_start_ticks(pid), sys.executable),\n"
    "      still_running(pid, process_start_ticks(pid) - 1, sys.executable))\n"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as nobody")
def test_the_pool_still_knows_a_worker_that_hides_its_environment() -> None:
    """The pool (its user's process) cannot read a private worker's /proc exe; the worker's pid
    and start time still identify it (PoolWorker.alive), so `workers stop` may signal it."""
    with holder_as_nobody("private") as pid:
        checked = subprocess.run(
            [*NOBODY, sys.executable, "-c", POOL_CHECK, str(pid)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (checked.returncode, checked.stdout) == (0, "True False\n"), checked.stderr
