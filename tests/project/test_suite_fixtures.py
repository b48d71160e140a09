"""The suite's own guards: shared workers start without the developer's teamctl and provider
settings, whatever the shell that runs pytest holds."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV
from teamctl.shared.process.parent_watch import PARENT_PID_ENV

from tests.support.waiting import wait_until
from tests.support.workers import ENV_PREFIXES, start_clean

USER_SETTINGS = {
    "OPENAI_API_KEY": "sk-from-the-developers-shell",
    "TEAMCTL_HEARTBEAT_TTL_S": "999",
    "REDIS_URL": "redis://elsewhere:6379/0",
}


def environ_of(pid: int) -> dict[str, str]:
    """The environment process `pid` was started with (Linux /proc)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {name.decode(): value.decode(errors="replace") for name, value in pairs}


def settings_in(environ: dict[str, str]) -> set[str]:
    """The teamctl, Redis and provider variables in `environ`, bar the one a run sets and the
    suite's own choice of how workers start."""
    return {name for name in environ if name.startswith(ENV_PREFIXES)} - {
        PARENT_PID_ENV,
        FORK_SERVER_ENV,
    }


@pytest.mark.exec_workers
def test_start_clean_leaves_the_shells_settings_out_of_the_workers(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in USER_SETTINGS.items():
        monkeypatch.setenv(name, value)
    group = LocalWorkers(redis_url, ["nothing-queued"], 1, tmp_path / "logs")
    start_clean(group)
    try:
        pid = group.processes[0].pid
        # Until it execs, the child shows the environment it was forked with, not its own.
        wait_until(
            lambda: b"rq.cli" in Path(f"/proc/{pid}/cmdline").read_bytes(),
            30,
            message="the worker to exec",
        )
        environ = environ_of(pid)
    finally:
        group.stop()
    assert settings_in(environ) == set()
    assert environ["RQ_REDIS_URL"] == redis_url
    # Only the workers' environment was cleaned, not the test's.
    assert os.environ["OPENAI_API_KEY"] == USER_SETTINGS["OPENAI_API_KEY"]


def test_the_session_workers_hold_no_teamctl_or_provider_settings(workers: str) -> None:
    client = redis.Redis.from_url(workers)
    pids = [
        w.pid
        for w in Worker.all(queue=Queue("members", connection=client))
        if Path(f"/proc/{w.pid}").exists()
    ]
    assert len(pids) >= 2
    for pid in pids:
        assert settings_in(environ_of(pid)) == set(), pid
