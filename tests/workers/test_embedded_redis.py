"""The embedded redis-server: started once, reused, stopped by pid, clear errors; reachable only
by its owner (a 0700 socket dir, no TCP) and only with its password."""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import redis
from click.testing import CliRunner
from rq import Queue
from teamctl.coordinator.cli import main
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.agent.offline_model import MODEL
from teamctl.shared.board import TaskBoard
from teamctl.shared.errors import InfraError
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.pids import (
    executable,
    pid_alive,
    process_start_ticks,
    same_process_alive,
)
from teamctl.shared.redis.connection import connect
from teamctl.shared.redis.embedded import (
    STARTUP_TIMEOUT_S,
    EmbeddedRedis,
    ServerProcess,
    StopResult,
    free_port,
    redis_cli_binary,
    redis_server_binary,
    short_socket_root,
)
from teamctl.shared.task_records import TaskSpec, TaskStatus

from tests.support.runs import make_run
from tests.support.waiting import wait_until

NOBODY_UID = 65534


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """An embedded server under this test's state dir, stopped by its pid afterwards."""
    embedded = EmbeddedRedis(tmp_path / "redis")
    yield embedded
    embedded.stop()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_start_reuse_and_stop(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis")
    url = server.ensure()
    try:
        client = redis.Redis.from_url(url, decode_responses=True)
        client.set("k", "v")
        assert EmbeddedRedis(tmp_path / "redis").ensure() == url  # a later command reuses it
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        # appendonly.aof up to Redis 6, an appendonlydir/ from 7: whichever server is on PATH.
        assert any((tmp_path / "redis").glob("appendonly*"))
    finally:
        assert server.stop() == StopResult(stopped=True)
    assert server.running_url() is None
    assert server.stop() == StopResult(stopped=False)


def test_socket_only_with_password_in_private_files(server: EmbeddedRedis) -> None:
    url = server.ensure()
    assert url.startswith("unix://:") and url.endswith(f"@{server.socket_path}?db=0")
    assert redis.Redis.from_url(url, decode_responses=True).config_get("port") == {"port": "0"}
    without_password = url.replace(f":{server.password_file.read_text().strip()}@", "")
    assert without_password.startswith("unix:///")
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(without_password).ping()
    assert mode(server.root) == 0o700 and mode(server.socket_path) == 0o700
    assert mode(server.url_file) == 0o600 and mode(server.password_file) == 0o600


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
def test_another_user_cannot_connect_even_with_the_password() -> None:
    # tmp_path sits under /tmp/pytest-of-root (0700), which would hide the socket by itself.
    outer = Path(tempfile.mkdtemp())
    outer.chmod(0o755)
    server = EmbeddedRedis(outer / "redis")
    try:
        server.ensure()
        env = {"REDISCLI_AUTH": server.password_file.read_text().strip()}
        done = subprocess.run(
            [redis_cli_binary(), "-s", str(server.socket_path), "PING"],
            env=env,
            user=NOBODY_UID,
            group=NOBODY_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert "Permission denied" in done.stdout + done.stderr, done
        assert "PONG" not in done.stdout
    finally:
        server.stop()
        shutil.rmtree(outer)


def test_a_long_state_dir_puts_the_socket_in_a_short_private_dir(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / ("d" * 100) / "redis")
    try:
        url = server.ensure()
        assert server.socket_path.is_relative_to(short_socket_root())
        assert redis.Redis.from_url(url).ping()
        assert mode(short_socket_root()) == 0o700 and mode(server.socket_path.parent) == 0o700
    finally:
        server.stop()
        shutil.rmtree(server.socket_path.parent, ignore_errors=True)


def test_a_crashed_server_is_restarted_with_the_same_password(server: EmbeddedRedis) -> None:
    url = server.ensure()
    pid = int(server.pid_file.read_text())
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: server.running_url() is None, 10, message="the server to die")
    assert server.ensure() == url  # stale socket and pid file cleared, URL unchanged
    assert int(server.pid_file.read_text()) != pid


def test_a_server_left_on_tcp_by_an_older_teamctl_is_moved_to_the_socket(
    server: EmbeddedRedis,
) -> None:
    server.root.mkdir(mode=0o755)
    port = free_port()
    tcp_url = f"redis://127.0.0.1:{port}/0"
    subprocess.run(  # how teamctl started it before: loopback TCP, no password
        [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "yes",
            "--pidfile",
            str(server.pid_file),
            "--dir",
            str(server.root),
            "--save",
            "",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    server.url_file.write_text(tcp_url + "\n")
    wait_until(lambda: server.running_url() == tcp_url, 10, message="the old server")

    url = server.ensure()

    assert url.startswith("unix://") and redis.Redis.from_url(url).ping()
    assert mode(server.root) == 0o700
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(tcp_url).ping()


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process of ours that a stale pid file may name; killed by its pid after."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait(timeout=30)


@pytest.mark.parametrize("record", ["none", "reused pid", "another pid"])
def test_stop_never_signals_a_process_a_stale_pid_file_names(
    tmp_path: Path, stranger: subprocess.Popen[bytes], record: str
) -> None:
    server = EmbeddedRedis(tmp_path / "state" / "redis")
    server.root.mkdir(parents=True, mode=0o700)
    server.pid_file.write_text(f"{stranger.pid}\n")
    ticks = process_start_ticks(stranger.pid)
    assert ticks is not None
    if record == "reused pid":  # the server that had this pid started earlier, then exited
        recorded = ServerProcess(
            pid=stranger.pid, start_ticks=ticks - 1, executable=str(executable(stranger.pid))
        )
    else:
        recorded = ServerProcess(pid=stranger.pid + 1, start_ticks=ticks, executable="/x")
    if record != "none":
        server.process_file.write_text(recorded.model_dump_json())

    stopped = CliRunner().invoke(main, ["redis", "stop"])

    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout == (
        f"not running (removed {server.pid_file}: pid {stranger.pid} is "
        "not the redis-server teamctl started, and was not signalled)\n"
    )
    assert stranger.poll() is None and pid_alive(stranger.pid)
    assert not server.pid_file.exists() and not server.process_file.exists()
    assert CliRunner().invoke(main, ["redis", "stop"]).stdout == "not running\n"


def test_the_start_records_the_server_it_stops(server: EmbeddedRedis) -> None:
    server.ensure()
    pid = int(server.pid_file.read_text())
    recorded = ServerProcess.model_validate_json(server.process_file.read_text())
    assert recorded == ServerProcess(
        pid=pid,
        start_ticks=process_start_ticks(pid),
        executable=str(Path(redis_server_binary()).resolve()),
    )
    assert mode(server.process_file) == 0o600 and mode(server.pid_file) == 0o600
    assert mode(server.log_file) == 0o600
    assert server.stop() == StopResult(stopped=True)
    assert not same_process_alive(pid, recorded.start_ticks)  # exited; maybe not yet reaped


@pytest.fixture
def cli_server(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """The embedded server `teamctl redis ...` uses in this test's state dir."""
    yield EmbeddedRedis(tmp_path / "state" / "redis")


def recorded(server: EmbeddedRedis) -> ServerProcess:
    """The record `start` wrote of the server it started."""
    return ServerProcess.model_validate_json(server.process_file.read_text())


def kill_if_running(process: ServerProcess) -> None:
    """Clean up after a failed test: SIGKILL that very process (same pid, same start) if it
    still runs."""
    if same_process_alive(process.pid, process.start_ticks):
        os.kill(process.pid, signal.SIGKILL)


def test_a_server_whose_program_was_upgraded_away_is_still_stopped_by_its_pid(
    cli_server: EmbeddedRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = tmp_path / "bin" / "redis-server"
    installed.parent.mkdir()
    shutil.copy2(redis_server_binary(), installed)
    monkeypatch.setenv("PATH", f"{installed.parent}{os.pathsep}{os.environ['PATH']}")
    cli_server.ensure()
    started = recorded(cli_server)
    pid = started.pid
    try:
        assert started.executable == str(installed.resolve())
        installed.unlink()  # an upgrade replaces the file the running server was started from
        assert os.readlink(f"/proc/{pid}/exe") == f"{installed.resolve()} (deleted)"
        assert executable(pid) == installed.resolve()

        stopped = CliRunner().invoke(main, ["redis", "stop"])
    finally:
        kill_if_running(started)

    assert (stopped.exit_code, stopped.stdout) == (0, "stopped\n"), stopped.output
    assert not same_process_alive(pid, started.start_ticks)
    assert not any(
        f.exists() for f in (cli_server.pid_file, cli_server.process_file, cli_server.url_file)
    )
    assert CliRunner().invoke(main, ["redis", "stop"]).stdout == "not running\n"


def test_a_recorded_server_running_another_program_is_left_running_and_recorded(
    cli_server: EmbeddedRedis,
) -> None:
    url = cli_server.ensure()
    started = recorded(cli_server)
    pid = started.pid
    edited = started.model_copy(update={"executable": "/opt/other/redis-server"})
    cli_server.process_file.write_text(edited.model_dump_json())
    try:
        refused = CliRunner().invoke(main, ["redis", "stop"])
        assert redis.Redis.from_url(url).ping() and int(cli_server.pid_file.read_text()) == pid
    finally:
        kill_if_running(started)

    assert refused.exit_code == 1, refused.output
    assert refused.stderr == (
        f"teamctl: pid {pid} in {cli_server.pid_file} started when the redis-server teamctl "
        f"started did, but runs {started.executable}, not the one in "
        f"{cli_server.process_file}; it was left running and recorded: check it, and stop it by "
        "its pid if it is the server\n"
    )
    assert cli_server.process_file.read_text() == edited.model_dump_json()


def waiting_for(lock: IO[str]) -> bool:
    """Whether some lock request waits on the file `lock` holds (/proc/locks marks it `->`)."""
    inode = os.fstat(lock.fileno()).st_ino
    return any(
        line.split()[1] == "->" and line.split()[6].endswith(f":{inode}")
        for line in Path("/proc/locks").read_text().splitlines()
    )


def test_a_stop_during_a_start_waits_and_stops_the_server_the_start_leaves(
    server: EmbeddedRedis,
) -> None:
    server.ensure()
    old = recorded(server)
    results: list[StopResult] = []
    stopper = threading.Thread(target=lambda: results.append(server.stop()))
    with open(server.root / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a start is under way
        stopper.start()
        wait_until(lambda: waiting_for(lock), 10, message="the stop to wait for the start lock")
        # What that start does meanwhile: the old server is gone, a new one takes its record.
        os.kill(old.pid, signal.SIGKILL)
        wait_until(
            lambda: not same_process_alive(old.pid, old.start_ticks),
            10,
            message="the old server to die",
        )
        server.start()
        new = recorded(server)
        assert results == [] and same_process_alive(new.pid, new.start_ticks)
    stopper.join(timeout=30)

    assert results == [StopResult(stopped=True)]
    assert new.pid != old.pid and not same_process_alive(new.pid, new.start_ticks)
    assert not server.pid_file.exists() and not server.process_file.exists()
    assert server.running_url() is None


def test_corrupt_data_is_a_clear_error_not_a_hang(server: EmbeddedRedis) -> None:
    server.root.mkdir(mode=0o700)
    (server.root / "appendonly.aof").write_text("this is not an append only file\n")
    started = time.monotonic()
    with pytest.raises(InfraError, match="did not start; its log ends: .*append only file"):
        server.ensure()
    # Only the time tells "noticed that the server exited" from "waited out the startup
    # timeout": both raise this error. Any time short of that timeout is a pass.
    assert time.monotonic() - started < STARTUP_TIMEOUT_S


def test_cli_prints_url_and_stops(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(main, ["redis", "url"])
    try:
        assert first.exit_code == 0, first.output
        url = first.stdout.strip()
        assert url.startswith("unix://:") and redis.Redis.from_url(url).ping()
        assert runner.invoke(main, ["redis", "url"]).stdout.strip() == url
        cli = subprocess.run(
            [
                sys.executable,
                "-c",
                "from teamctl.coordinator.cli import main; main()",
                "redis",
                "cli",
                "CONFIG",
                "GET",
                "port",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert cli.stdout.split() == ["port", "0"], cli.stderr
    finally:
        stopped = runner.invoke(main, ["redis", "stop"])
    assert stopped.stdout.strip() == "stopped"


def test_rq_worker_started_from_the_printed_url_completes_a_task(
    server: EmbeddedRedis, run_id: str, tmp_path: Path
) -> None:
    url = server.ensure()
    make_run(
        redis.Redis.from_url(url, decode_responses=True),
        run_id,
        models={"m1": MODEL},
        tasks=[TaskSpec(id="t1", member_id="m1", task="Say hello")],
        workspace=tmp_path / "ws",
        api_base="http://127.0.0.1:9/v1",
    )
    queue = f"q-{uuid.uuid4().hex[:8]}"
    Queue(queue, connection=redis.Redis.from_url(url)).enqueue(
        "teamctl.worker.jobs.run_task", run_id, "t1", job_timeout=120
    )

    done = subprocess.run(  # --burst: the worker exits once the queue is empty
        [
            sys.executable,
            "-m",
            "rq.cli",
            "worker",
            "--burst",
            "-c",
            "teamctl.worker.settings",
            "-u",
            url,
            queue,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr
    task = TaskBoard(redis.Redis.from_url(url, decode_responses=True), RunKeys(run_id)).get("t1")
    assert task.status is TaskStatus.COMPLETED


@pytest.mark.exec_workers
def test_local_workers_keep_the_password_out_of_their_command_line(
    server: EmbeddedRedis, tmp_path: Path
) -> None:
    url = server.ensure()
    group = LocalWorkers(url, ["members"], 1, tmp_path / "logs")
    group.start()
    try:
        proc = Path(f"/proc/{group.processes[0].pid}")
        # Readable by every user; empty for a moment while the exec sets it up.
        cmdline = str(
            wait_until(
                lambda: (proc / "cmdline").read_text(), 10, message="the worker's command line"
            )
        )
        assert "rq.cli" in cmdline and server.password_file.read_text().strip() not in cmdline
        assert f"RQ_REDIS_URL={url}\0" in (proc / "environ").read_text()  # owner only
        logs = tmp_path / "logs"
        assert mode(logs) == 0o700 and [mode(f) for f in logs.iterdir()] == [0o600]
    finally:
        group.stop()


def test_unreachable_redis_is_a_one_line_error() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(InfraError, match="cannot reach Redis at"):
        connect(url)
    result = CliRunner().invoke(main, ["status", "some-run", "--redis-url", url])
    assert result.exit_code == 1
    assert result.stderr.startswith("teamctl: cannot reach Redis at")
    # The URL came from the flag: the advice names both ways, and one sentence ends once.
    assert result.stderr.rstrip().endswith(
        "Start it, or give neither REDIS_URL nor --redis-url to use the embedded one"
    )
    assert ".." not in result.stderr
    assert "Traceback" not in result.output


def test_errors_do_not_print_the_password() -> None:
    url = f"unix://:s3cret@/nonexistent/{uuid.uuid4().hex}.sock?db=0"
    with pytest.raises(InfraError) as raised:
        connect(url)
    assert "s3cret" not in str(raised.value) and "unix://:***@/nonexistent/" in str(raised.value)


READING_VERBS = [
    ["workers"],
    ["workers", "--json"],
    ["runs"],
    ["runs", "--json"],
    ["status", "r1"],
    ["tasks", "r1"],
    ["tasks", "r1", "--follow"],
    ["events", "r1"],
    ["messages", "r1"],
    ["messages", "r1", "--follow"],
    ["transcript", "r1", "t1"],
    ["files", "r1"],
    ["files", "r1", "notes.txt"],
    ["export", "r1", "{out}"],
    ["report", "r1", "--html", "{out}.html"],
    ["dashboard", "--port", "0"],
    ["teams"],
    ["teams", "--json"],
    ["team", "list"],
    ["team", "inbox"],
    ["team", "messages"],
    ["team", "requests"],
    ["team", "task", "list"],
    ["team", "export", "{out}"],
]
"""Every verb that only reads: with no embedded server running, it says so and starts none."""


def listening_on(path: Path) -> bool:
    """Whether any process of this host listens on the unix socket `path` (/proc/net/unix
    lists every bound socket with its path, whoever owns it)."""
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return any(line.split()[-1] == str(path) for line in lines if len(line.split()) == 8)


@pytest.fixture
def state_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """The embedded server of this test's state dir, as the CLI starts it; stopped by its pid
    afterwards, whatever the test left."""
    embedded = EmbeddedRedis(tmp_path / "state" / "redis")
    yield embedded
    embedded.stop()


def test_reading_verbs_start_no_server_and_say_there_is_nothing_to_show(
    tmp_path: Path, state_redis: EmbeddedRedis
) -> None:
    server = state_redis
    runner = CliRunner()
    fresh = runner.invoke(main, ["runs"])  # a new user: no state dir yet
    assert (fresh.exit_code, fresh.stdout) == (0, ""), fresh.output
    # One line; the command it names is spelled for this shell (this checkout's teamctl).
    assert re.fullmatch(
        r"teamctl: no embedded Redis running; nothing to show "
        r"\(`\S*teamctl redis start` starts it\)\n",
        fresh.stderr,
    ), fresh.stderr
    assert not server.root.exists()

    created = runner.invoke(main, ["team", "create"])  # a verb that writes starts it
    assert created.exit_code == 0, created.output
    assert server.running_url() is not None and listening_on(server.socket_path)
    assert runner.invoke(main, ["redis", "stop"]).stdout == "stopped\n"

    for verb in READING_VERBS:
        args = [arg.format(out=tmp_path / "out") for arg in verb]
        result = runner.invoke(main, args)
        assert (result.exit_code, result.stdout, result.stderr) == (0, "", fresh.stderr), args
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.html").exists()
    assert not server.pid_file.exists() and not server.socket_path.exists()
    assert not listening_on(server.socket_path) and server.running_url() is None

    started = runner.invoke(main, ["redis", "start"])
    assert started.stdout == "started\n" and listening_on(server.socket_path)
    assert runner.invoke(main, ["redis", "start"]).stdout == "already running\n"
    listed = runner.invoke(main, ["teams"])  # the data kept on disk, attached to
    assert listed.exit_code == 0 and listed.stdout.startswith("default\t0\t0\t0 tokens\t"), (
        listed.stdout
    )
