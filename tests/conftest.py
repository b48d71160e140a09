"""Fixtures: a real redis-server on a free loopback port, the scripted model server, and real
`rq worker` processes. Everything started here is stopped by its pid. The helpers they and the
tests share are in tests/support."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from rq import Queue, Worker
from teamctl.coordinator.local_workers.pool import WorkerPool
from teamctl.coordinator.local_workers.processes import LocalWorkers
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV, NO_FORK_SERVER
from teamctl.shared.redis.embedded import throwaway_redis

from tests.support.hosts import TwoHosts, network_namespaces
from tests.support.injection import MARKED_QUEUE, MarkedWorkers, marked_env
from tests.support.llm import ScriptedLLM
from tests.support.waiting import wait_until
from tests.support.workers import (
    SHARED_TRAILS,
    SharedWorkerTrail,
    fork_server,
    keep_trail,
    start_clean,
    user_setting,
    wait_for_idle_queue,
)

_db_numbers = itertools.cycle(range(1, 16))

# One example database in the checkout for every run and both tiers, named rather than left to
# Hypothesis: its built-in `ci` profile (taken whenever $CI is set) keeps no database and ignores
# the printed seed, so a failure found in CI could not be replayed from what the log shows.
# Slow generation is not a failure: a 2-core host running both tiers at once once took 1.3 s to
# draw two plans, and the health check failed a test whose examples all passed.
settings.register_profile(
    "teamctl",
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
    database=DirectoryBasedExampleDatabase(
        Path(__file__).resolve().parent.parent / ".hypothesis" / "examples"
    ),
)
settings.load_profile("teamctl")


@pytest.fixture(scope="session", autouse=True)
def worker_fork_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Workers the tests start, directly or through `teamctl run`, are forked from one preloaded
    process for the session instead of a parent per pool or run (~4 s of CPU each, about sixty
    times a run); a test marked `default_workers` gets teamctl's own parents, one marked
    `exec_workers` executes the documented command."""
    with (
        fork_server(tmp_path_factory.mktemp("fork-server")) as socket_path,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv(FORK_SERVER_ENV, socket_path)
        yield socket_path


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server for the whole session; yields its base URL (db 0)."""
    with throwaway_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def two_hosts() -> Iterator[TwoHosts]:
    """Two network namespaces joined by a veth pair: a Redis host and another host."""
    yield from network_namespaces()


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """A flushed database of its own (1-15) for tests that do not need workers."""
    url = redis_server.rsplit("/", 1)[0] + f"/{next(_db_numbers)}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def conn(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def clean_environ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[None]:
    """No user configuration leaks in; each test gets its own state dir, and the local worker
    pool a `teamctl run` on the embedded defaults may start there is stopped by pid after it."""
    for name in list(os.environ):
        if user_setting(name):
            monkeypatch.delenv(name)
    if request.node.get_closest_marker("exec_workers"):
        monkeypatch.setenv(FORK_SERVER_ENV, NO_FORK_SERVER)
    elif request.node.get_closest_marker("default_workers"):
        monkeypatch.delenv(FORK_SERVER_ENV)
    monkeypatch.setenv("TEAMCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    yield
    state = tmp_path / "state"
    if (state / "pool").is_dir():
        WorkerPool(state / "pool", state / "logs").stop()


@pytest.fixture(scope="session")
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM()
    server.start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def scripts_used_as_written(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test fails if the scripted server got a request its scripts did not foresee (answered
    with an error that litellm or teamctl may have retried silently) or left replies unused."""
    if "llm" not in request.fixturenames:
        yield
        return
    server: ScriptedLLM = request.getfixturevalue("llm")
    server.begin_test()
    yield
    problems = server.end_test()
    assert not problems, "the scripted model server was not used as scripted: " + "; ".join(
        problems
    )


@pytest.fixture(scope="session")
def workers(
    redis_server: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[str]:
    """Two real, preloaded `rq worker` processes on queue `members`, shared by the session."""
    logs = tmp_path_factory.mktemp("worker-logs")
    group = LocalWorkers(redis_server, ["members"], 2, logs)
    start_clean(group)
    keep_trail(pytestconfig, "workers", SharedWorkerTrail(redis_server, "members", logs))
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    # These two, by pid: a registry entry of a worker that died lingers until its TTL.
    wait_until(
        lambda: pids <= {w.pid for w in Worker.all(queue=Queue("members", connection=client))},
        60,
        message="our 2 rq workers to register on members",
    )
    yield redis_server
    group.stop()


@pytest.fixture(scope="session")
def marked_workers(
    redis_server: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[MarkedWorkers]:
    """Two real `rq worker` processes on queue `marked` (db 0) whose environment holds the
    injection suite's marker secret (tests/support/injection.py)."""
    logs = tmp_path_factory.mktemp("marked-worker-logs")
    group = LocalWorkers(redis_server, [MARKED_QUEUE], 2, logs)
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if user_setting(name):
                patch.delenv(name)
        for name, value in marked_env().items():
            patch.setenv(name, value)
        group.start()
    keep_trail(pytestconfig, "marked_workers", SharedWorkerTrail(redis_server, MARKED_QUEUE, logs))
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    wait_until(
        lambda: pids <= {w.pid for w in Worker.all(queue=Queue(MARKED_QUEUE, connection=client))},
        60,
        message="the marked rq workers to register on marked",
    )
    yield MarkedWorkers(redis_server, logs)
    group.stop()


@pytest.fixture(autouse=True)
def shared_workers_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses shared workers hands them back idle, with nothing queued (a job may still
    be finishing a refused write), and fails if a job failed or a worker logged a traceback,
    unless it is marked `worker_failures_expected`: a failure inside a worker must not pass
    silently just because the test's own assertions looked elsewhere."""
    used = [name for name in ("workers", "marked_workers") if name in request.fixturenames]
    if not used:
        yield
        return
    for name in used:
        request.getfixturevalue(name)
    trails = [request.config.stash[SHARED_TRAILS][name] for name in used]
    for trail in trails:
        trail.mark()
    yield
    for trail in trails:
        wait_for_idle_queue(trail.redis_url, trail.queue)
    news = [line for trail in trails for line in trail.news()]
    expected = request.node.get_closest_marker("worker_failures_expected")
    if expected is None:
        assert not news, "a shared worker failed during the test:\n" + "\n".join(news)
    else:
        assert news, (
            "marked worker_failures_expected, but no job failed and no worker logged "
            "a traceback: drop the mark"
        )


@pytest.fixture
def group_reaper() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes started in a session of their own; SIGKILLed by process group if a test failed
    before they ended."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


@pytest.fixture
def team() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def wconn(workers: str) -> redis.Redis:
    """A client of the database the shared workers serve (db 0)."""
    return redis.Redis.from_url(workers, decode_responses=True)


@pytest.fixture
def run_id() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
