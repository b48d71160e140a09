"""The fork server the suite starts its workers from: a forked worker is a real `rq worker` with the
environment (PYTHONPATH on its import path), working directory and log file it was asked for,
and it reports how it ended."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import uuid
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from rq.job import Job
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.errors import InfraError
from teamctl.shared.worker_fork import FORK_SERVER_ENV, ForkedWorker, read_all

from tests.support.waiting import wait_until


def run_job(queue: Queue, function: str, *args: str) -> object:
    job = queue.enqueue(function, *args)
    wait_until(lambda: Job.fetch(job.id, connection=queue.connection).get_status() == "finished",
               60, message=f"{function} to finish")
    return Job.fetch(job.id, connection=queue.connection).return_value()


def test_a_forked_worker_serves_with_the_environment_and_directory_it_was_given(
        redis_server: str, worker_fork_server: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"q-{uuid.uuid4().hex[:8]}"
    project = tmp_path / "project"
    project.mkdir()
    (project / "libs").mkdir()
    (project / "libs" / "forked_mark_mod.py").write_text("def mark() -> str:\n    return 'found'\n")
    monkeypatch.chdir(project)
    monkeypatch.setenv("FORKED_WORKER_MARK", "given")
    # Relative, as people write it: the worker imports from it as an executed one would.
    monkeypatch.setenv("PYTHONPATH", "libs")
    group = LocalWorkers(redis_server, [name], 1, tmp_path / "logs")
    group.start()
    try:
        (worker,) = group.processes
        assert isinstance(worker, ForkedWorker)
        queue = Queue(name, connection=redis.Redis.from_url(redis_server))
        wait_until(lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)}, 60,
                   message="the forked worker to register")

        assert run_job(queue, "os.getenv", "FORKED_WORKER_MARK") == "given"
        assert run_job(queue, "os.getcwd") == str(project)
        assert run_job(queue, "forked_mark_mod.mark") == "found"
        assert worker.poll() is None
    finally:
        group.stop()
    assert worker.poll() == 0  # RQ's warm shutdown, reported by the server that reaped it
    (log,) = (tmp_path / "logs").glob("*.log")
    assert f"Listening on {name}" in log.read_text()


def test_a_killed_forked_worker_reports_the_signal_and_the_socket_is_private(
        redis_server: str, worker_fork_server: str, tmp_path: Path) -> None:
    assert stat.S_IMODE(os.stat(worker_fork_server).st_mode) == 0o600
    group = LocalWorkers(redis_server, [f"q-{uuid.uuid4().hex[:8]}"], 1, tmp_path / "logs")
    group.start()
    (worker,) = group.processes
    worker.kill()
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert ForkedWorker(worker_fork_server, pid=1).poll() is None  # not one of its own


def test_a_bad_request_is_refused_and_the_server_keeps_serving(
        redis_server: str, worker_fork_server: str, tmp_path: Path) -> None:
    for garbage in (b"not json\n", b'{"op": "spawn", "argv": "worker"}\n',
                    b'{"op": "spawn", "argv": [], "env": {}, "cwd": "/"}\n'):  # no log fd
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(worker_fork_server)
            client.sendall(garbage)
            client.shutdown(socket.SHUT_WR)
            assert read_all(client).startswith(b'{"refused":"'), garbage
    group = LocalWorkers(redis_server, [f"q-{uuid.uuid4().hex[:8]}"], 1, tmp_path / "logs")
    group.start()
    try:
        assert group.processes[0].poll() is None
    finally:
        group.stop()


def test_a_missing_server_is_an_infra_error_that_says_how_to_fix_it(
        redis_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gone = tmp_path / "gone.sock"
    monkeypatch.setenv(FORK_SERVER_ENV, str(gone))
    group = LocalWorkers(redis_server, ["members"], 1, tmp_path / "logs")
    with pytest.raises(InfraError) as raised:
        group.start()
    assert f"{sys.executable} -m teamctl.worker.fork_server {gone}" in str(raised.value)
    assert f"unset {FORK_SERVER_ENV}" in str(raised.value)
    assert group.processes == []
