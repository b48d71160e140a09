"""Fixtures: a real redis-server on a free loopback port, the scripted model server, and real
`rq worker` processes. Everything started here is stopped by its pid."""

from __future__ import annotations

import itertools
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, Worker
from teamctl.coordinator.cli.local_workers import LocalWorkers
from teamctl.coordinator.cli.worker_pool import WorkerPool
from teamctl.shared.bus import MessageBus
from teamctl.shared.embedded_redis import throwaway_redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.roster import write_roster
from teamctl.shared.runstore import RunStore

from tests.support.injection import MARKED_QUEUE, MarkedWorkers, marked_env
from tests.support.llm import ScriptedLLM

ENV_PREFIXES = ("TEAMCTL_", "REDIS_URL", "OPENAI_", "ANTHROPIC_", "GEMINI_", "MISTRAL_", "GROQ_",
                "DEEPSEEK_", "OPENROUTER_")
_db_numbers = itertools.cycle(range(1, 16))


def wait_until(predicate: Callable[[], object], timeout_s: float = 30.0,
               interval_s: float = 0.02, message: str = "condition") -> object:
    """Poll `predicate` until it returns something truthy, or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def assert_ttl_as_set(conn: redis.Redis, key: str, ttl_s: float, set_at: float) -> None:
    """`key` expires `ttl_s` after the write that began at `set_at` (time.monotonic() taken just
    before it): its TTL may have lost only the milliseconds that passed since."""
    left_ms = conn.pttl(key)
    elapsed_ms = math.ceil((time.monotonic() - set_at) * 1000)
    ttl_ms = round(ttl_s * 1000)
    # Redis keeps expiry times in whole milliseconds: the set and the read may each round by one.
    assert ttl_ms - elapsed_ms - 2 <= left_ms <= ttl_ms, (key, left_ms, ttl_ms, elapsed_ms)


def coordinator_store(conn: redis.Redis, run_id: str) -> RunStore:
    """A RunStore that holds the run's lease (an hour, no renewal), as a coordinator's does."""
    lease = Lease(conn, RunKeys(run_id), ttl_s=3600)
    assert lease.try_acquire(), f"run {run_id} already has a coordinator"
    return RunStore(conn, RunKeys(run_id), lease.owner)


def roster_bus(conn: redis.Redis, run_id: str, member_ids: list[str],
               **options: Any) -> MessageBus:
    """A bus of a run with no spec: its roster written first, as creating a run writes it."""
    keys = RunKeys(run_id)
    write_roster(conn, keys, member_ids)
    return MessageBus(conn, keys, **options)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server for the whole session; yields its base URL (db 0)."""
    with throwaway_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


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
def clean_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No user configuration leaks in; each test gets its own state dir, and the local worker
    pool a `teamctl run` on the embedded defaults may start there is stopped by pid after it."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIXES):
            monkeypatch.delenv(name)
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
        problems)


def start_clean(group: LocalWorkers) -> None:
    """Start `group` without the user's teamctl and provider settings in its environment: a
    session or module fixture is built before the per-test clean_environ, and its workers
    would keep them for every test."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                patch.delenv(name)
        group.start()


@pytest.fixture(scope="session")
def workers(redis_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Two real, preloaded `rq worker` processes on queue `members`, shared by the session."""
    group = LocalWorkers(redis_server, ["members"], 2, tmp_path_factory.mktemp("worker-logs"))
    start_clean(group)
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    # These two, by pid: a registry entry of a worker that died lingers until its TTL.
    wait_until(lambda: pids <= {w.pid for w in Worker.all(queue=Queue("members",
                                                                      connection=client))},
               60, message="our 2 rq workers to register on members")
    yield redis_server
    group.stop()


@pytest.fixture(scope="session")
def marked_workers(redis_server: str,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarkedWorkers]:
    """Two real `rq worker` processes on queue `marked` (db 0) whose environment holds the
    injection suite's marker secret (tests/support/injection.py)."""
    logs = tmp_path_factory.mktemp("marked-worker-logs")
    group = LocalWorkers(redis_server, [MARKED_QUEUE], 2, logs)
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                patch.delenv(name)
        for name, value in marked_env().items():
            patch.setenv(name, value)
        group.start()
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    wait_until(lambda: pids <= {w.pid for w in Worker.all(queue=Queue(MARKED_QUEUE,
                                                                      connection=client))},
               60, message="the marked rq workers to register on marked")
    yield MarkedWorkers(redis_server, logs)
    group.stop()


@pytest.fixture(autouse=True)
def shared_workers_left_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses the shared workers hands them back idle, with nothing queued, so the
    next test does not inherit its jobs (a job may still be finishing a refused write)."""
    yield
    if "workers" not in request.fixturenames:
        return
    client = redis.Redis.from_url(request.getfixturevalue("workers"))
    queue = Queue("members", connection=client)
    wait_until(lambda: queue.count == 0 and all(
        w.get_state() != "busy" for w in Worker.all(queue=queue)), 60,
        message="the shared workers to be idle with nothing queued")


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
