"""The container health check (`python -m teamctl.worker.health`) against real RQ workers: healthy
only while a live worker of this host is registered on the queue it checks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import redis
from rq import Queue, Worker


def health(redis_url: str | None, *queues: str) -> subprocess.CompletedProcess[str]:
    """Run the health check as compose runs it, with REDIS_URL set (or not)."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    return subprocess.run(
        [sys.executable, "-m", "teamctl.worker.health", *queues],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_healthy_while_a_worker_of_this_host_serves_the_queue(workers: str) -> None:
    result = health(workers)
    assert (result.returncode, result.stderr) == (0, "")
    assert health(workers, "members").returncode == 0


def test_unhealthy_when_no_worker_serves_the_queue(workers: str) -> None:
    result = health(workers, "members", "nobody-listens")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"unhealthy: no live worker of host {socket.gethostname()} is registered on nobody-listens"
    ]


def test_a_worker_of_another_host_does_not_count(redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    elsewhere = Worker([Queue("members", connection=conn)], connection=conn, name="elsewhere")
    elsewhere.hostname = "another-host"
    elsewhere.register_birth()
    assert [w.hostname for w in Worker.all(queue=Queue("members", connection=conn))] == [
        "another-host"
    ]
    assert health(redis_url).returncode == 1


def test_a_dead_worker_of_this_host_does_not_count(redis_url: str) -> None:
    conn = redis.Redis.from_url(redis_url)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = Worker([Queue("members", connection=conn)], connection=conn, name="dead")
    dead.pid = int(gone.stdout)  # a pid that exited: its registration lingers until its TTL
    dead.register_birth()
    assert health(redis_url).returncode == 1


def test_unreachable_redis_or_none_set_is_one_line_and_exit_1() -> None:
    for url in ("redis://127.0.0.1:1/0", None):
        result = health(url)
        assert result.returncode == 1
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert result.stderr.startswith("unhealthy: ")
