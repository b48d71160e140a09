"""The fork server the suite starts its workers from: a forked worker is a real `rq worker` with the
environment (PYTHONPATH on its import path), working directory and log file it was asked for,
and it reports how it ended."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from rq.job import Job
from teamctl.coordinator.local_workers.processes import LocalWorkers, stop_process
from teamctl.shared.errors import ConfigError, InfraError
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV, ForkedWorker, read_all, spawn
from teamctl.worker.rq_bootstrap import WORKER_CLASS

from tests.support.waiting import wait_until

NOBODY_UID = 65534
LISTENER = """
import os, socket, sys
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))  # here: this interpreter's own files may be closed to that user
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
listener.listen(4)
print("listening", flush=True)
while True:
    connection, _ = listener.accept()
    connection.settimeout(10)
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 4)
    while chunk := connection.recv(65536):
        data += chunk
    print(f"received {len(data)} bytes and {len(fds)} descriptors", flush=True)
    if data:
        connection.sendall(b'{"refused": "recorded"}')
    connection.close()
"""
"""Stands in for another user's fork server: it becomes that user, binds, answers every request
and prints, one line per connection, what it was sent."""


def run_job(queue: Queue, function: str, *args: str) -> object:
    job = queue.enqueue(function, *args)
    wait_until(
        lambda: Job.fetch(job.id, connection=queue.connection).get_status() == "finished",
        60,
        message=f"{function} to finish",
    )
    return Job.fetch(job.id, connection=queue.connection).return_value()


def test_a_forked_worker_serves_with_the_environment_and_directory_it_was_given(
    redis_server: str, worker_fork_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
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
        wait_until(
            lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)},
            60,
            message="the forked worker to register",
        )

        assert run_job(queue, "os.getenv", "FORKED_WORKER_MARK") == "given"
        assert run_job(queue, "os.getcwd") == str(project)
        assert run_job(queue, "forked_mark_mod.mark") == "found"
        assert worker.poll() is None
    finally:
        group.stop()
    assert worker.poll() == 0  # RQ's warm shutdown, reported by the server that reaped it
    (log,) = (tmp_path / "logs").glob("*.log")
    assert f"Listening on {name}" in log.read_text()


def test_a_forked_worker_without_teamctls_classes_starts_itself_again_as_rq(
    redis_server: str, worker_fork_server: str, tmp_path: Path
) -> None:
    """`rq worker -c teamctl.worker.settings` names no worker class: the worker executes itself
    again with teamctl's, from the command it was asked to run, not the fork server's."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k != FORK_SERVER_ENV}
    with (tmp_path / "worker.log").open("wb") as log:
        worker = spawn(
            worker_fork_server,
            ["worker", "-c", "teamctl.worker.settings", "-u", redis_server, name],
            env,
            log.fileno(),
        )
    try:
        queue = Queue(name, connection=redis.Redis.from_url(redis_server))
        wait_until(
            lambda: worker.pid in {w.pid for w in Worker.all(queue=queue)},
            120,
            message="the worker started again to register",
        )
        assert run_job(queue, "os.getenv", "RQ_WORKER_CLASS") == WORKER_CLASS
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert "Listening on" in (tmp_path / "worker.log").read_text()


def test_a_killed_forked_worker_reports_the_signal_and_the_socket_is_private(
    redis_server: str, worker_fork_server: str, tmp_path: Path
) -> None:
    assert stat.S_IMODE(os.stat(worker_fork_server).st_mode) == 0o600
    group = LocalWorkers(redis_server, [f"q-{uuid.uuid4().hex[:8]}"], 1, tmp_path / "logs")
    group.start()
    (worker,) = group.processes
    worker.kill()
    assert worker.wait(timeout=30) == -signal.SIGKILL
    assert ForkedWorker(worker_fork_server, pid=1).poll() is None  # not one of its own


def test_a_bad_request_is_refused_and_the_server_keeps_serving(
    redis_server: str, worker_fork_server: str, tmp_path: Path
) -> None:
    for garbage in (
        b"not json\n",
        b'{"op": "spawn", "argv": "worker"}\n',
        b'{"op": "spawn", "argv": [], "env": {}, "cwd": "/"}\n',
    ):  # no log fd
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
    redis_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = tmp_path / "gone.sock"
    monkeypatch.setenv(FORK_SERVER_ENV, str(gone))
    group = LocalWorkers(redis_server, ["members"], 1, tmp_path / "logs")
    with pytest.raises(InfraError) as raised:
        group.start()
    started_as = f"{sys.executable} -m teamctl.worker.fork_server {gone}"
    assert started_as in str(raised.value)
    assert f"unset {FORK_SERVER_ENV}" in str(raised.value)
    assert group.processes == []


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory another user can enter (tmp_path's parents are root's alone)."""
    outer = Path(tempfile.mkdtemp())
    outer.chmod(0o755)
    yield outer
    shutil.rmtree(outer)


def listen_as_nobody(socket_path: Path, log: Path) -> subprocess.Popen[bytes]:
    """The stand-in listener running as nobody, bound at `socket_path`."""
    with log.open("wb") as out:
        listener = subprocess.Popen(
            [sys.executable, "-c", LISTENER, str(socket_path), str(NOBODY_UID)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    wait_until(
        lambda: "listening" in log.read_text() or listener.poll() is not None,
        30,
        message="the listener to bind",
    )
    assert listener.poll() is None, log.read_text()
    return listener


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
@pytest.mark.parametrize(
    "where",
    [
        "another user's socket in my directory",
        "a directory others may write",
        "another user's directory",
    ],
)
def test_a_socket_that_is_not_the_users_own_is_refused_and_sent_nothing(
    redis_server: str, shared_tmp: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    theirs = shared_tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY_UID, NOBODY_UID)
    if where == "a directory others may write":
        theirs.chmod(0o1777)  # as /tmp is
        os.chown(theirs, os.getuid(), os.getgid())
    log = tmp_path / "listener.log"
    listener = listen_as_nobody(theirs / "fork.sock", log)
    try:
        socket_path = theirs / "fork.sock"
        if where == "another user's socket in my directory":
            mine = shared_tmp / "mine"
            mine.mkdir(mode=0o700)
            socket_path = socket_path.rename(mine / "fork.sock")  # still theirs, now here
        monkeypatch.setenv(FORK_SERVER_ENV, str(socket_path))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-nobody")
        group = LocalWorkers(redis_server, ["members"], 1, tmp_path / "logs")
        with pytest.raises(ConfigError) as refused:
            group.start()
        assert group.processes == []
        message = str(refused.value)
        assert message.startswith(f"{FORK_SERVER_ENV}={socket_path}: ") and "\n" not in message
        if where == "another user's socket in my directory":
            assert f"runs as uid {NOBODY_UID}, not as you" in message
            wait_until(
                lambda: "received" in log.read_text(),
                30,
                message="the listener to see the connection close",
            )
            expected = ["listening", "received 0 bytes and 0 descriptors"]
        else:
            assert f"its directory {theirs} " in message
            assert (
                "writable by other users (mode 1777)" in message
                if where == "a directory others may write"
                else f"belongs to uid {NOBODY_UID}, not to you" in message
            )
            expected = ["listening"]  # not even a connection
        assert "unset " + FORK_SERVER_ENV in message
    finally:
        stop_process(listener, timeout_s=10)
    assert log.read_text().splitlines() == expected
