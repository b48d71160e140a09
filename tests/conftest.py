"""Fixtures: a real redis-server on a free loopback port, the scripted model server, and real
`rq worker` processes. Everything started here is stopped by its pid."""

from __future__ import annotations

import itertools
import math
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase
from rq import Queue, Worker
from rq.registry import FailedJobRegistry
from teamctl.coordinator.cli.local_workers import LocalWorkers
from teamctl.coordinator.cli.worker_pool import WorkerPool
from teamctl.shared.bus import MessageBus
from teamctl.shared.embedded_redis import throwaway_redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.roster import write_roster
from teamctl.shared.runstore import RunStore

from tests.injection_support import MARKED_QUEUE, MarkedWorkers, marked_env
from tests.scripted_llm import ScriptedLLM

ENV_PREFIXES = ("TEAMCTL_", "REDIS_URL", "OPENAI_", "ANTHROPIC_", "GEMINI_", "MISTRAL_", "GROQ_",
                "DEEPSEEK_", "OPENROUTER_")
_db_numbers = itertools.cycle(range(1, 16))
TRACEBACK = b"Traceback (most recent call last)"

# One example database in the checkout for every run and both tiers, named rather than left to
# Hypothesis: its built-in `ci` profile (taken whenever $CI is set) keeps no database and ignores
# the printed seed, so a failure found in CI could not be replayed from what the log shows.
settings.register_profile(
    "teamctl", print_blob=True,
    database=DirectoryBasedExampleDatabase(Path(__file__).resolve().parent.parent
                                           / ".hypothesis" / "examples"))
settings.load_profile("teamctl")


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


@dataclass
class SharedWorkerTrail:
    """What a group of shared workers leaves when a job goes wrong: the failed jobs of its queue
    and the tracebacks in its logs, read from where the last test left off."""

    redis_url: str
    queue: str
    log_dir: Path
    log_offsets: dict[Path, int] = field(default_factory=dict)
    failed_seen: set[str] = field(default_factory=set)

    def mark(self) -> None:
        """Take everything so far as seen: a test answers only for what happens during it."""
        self.log_offsets = {path: path.stat().st_size for path in self.log_dir.glob("*.log")}
        self.failed_seen = set(self._failed_ids())

    def news(self) -> list[str]:
        """The failed jobs and worker tracebacks since the last mark, one line each."""
        found = [f"job {job_id} is in the FailedJobRegistry of {self.queue}"
                 for job_id in self._failed_ids() if job_id not in self.failed_seen]
        for path in sorted(self.log_dir.glob("*.log")):
            with path.open("rb") as log:
                log.seek(self.log_offsets.get(path, 0))
                text = log.read()
            if TRACEBACK in text:
                at = text.index(TRACEBACK)
                found.append(f"{path.name} logged a traceback: "
                             + text[max(0, at - 300):at + 1500].decode(errors="replace"))
        return found

    def _failed_ids(self) -> list[str]:
        client = redis.Redis.from_url(self.redis_url)
        try:
            return [job_id.decode() if isinstance(job_id, bytes) else job_id
                    for job_id in FailedJobRegistry(self.queue, connection=client).get_job_ids()]
        finally:
            client.close()


SHARED_TRAILS = pytest.StashKey[dict[str, SharedWorkerTrail]]()


def keep_trail(config: pytest.Config, fixture: str, trail: SharedWorkerTrail) -> None:
    """Let the per-test check find the trail of the shared workers `fixture` started."""
    config.stash.setdefault(SHARED_TRAILS, {})[fixture] = trail


@pytest.fixture(scope="session")
def workers(redis_server: str, tmp_path_factory: pytest.TempPathFactory,
            pytestconfig: pytest.Config) -> Iterator[str]:
    """Two real, preloaded `rq worker` processes on queue `members`, shared by the session."""
    logs = tmp_path_factory.mktemp("worker-logs")
    group = LocalWorkers(redis_server, ["members"], 2, logs)
    start_clean(group)
    keep_trail(pytestconfig, "workers", SharedWorkerTrail(redis_server, "members", logs))
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    # These two, by pid: a registry entry of a worker that died lingers until its TTL.
    wait_until(lambda: pids <= {w.pid for w in Worker.all(queue=Queue("members",
                                                                      connection=client))},
               60, message="our 2 rq workers to register on members")
    yield redis_server
    group.stop()


@pytest.fixture(scope="session")
def marked_workers(redis_server: str, tmp_path_factory: pytest.TempPathFactory,
                   pytestconfig: pytest.Config) -> Iterator[MarkedWorkers]:
    """Two real `rq worker` processes on queue `marked` (db 0) whose environment holds the
    injection suite's marker secret (tests/injection_support.py)."""
    logs = tmp_path_factory.mktemp("marked-worker-logs")
    group = LocalWorkers(redis_server, [MARKED_QUEUE], 2, logs)
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                patch.delenv(name)
        for name, value in marked_env().items():
            patch.setenv(name, value)
        group.start()
    keep_trail(pytestconfig, "marked_workers", SharedWorkerTrail(redis_server, MARKED_QUEUE, logs))
    pids = {p.pid for p in group.processes}
    client = redis.Redis.from_url(redis_server)
    wait_until(lambda: pids <= {w.pid for w in Worker.all(queue=Queue(MARKED_QUEUE,
                                                                      connection=client))},
               60, message="the marked rq workers to register on marked")
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
        assert news, ("marked worker_failures_expected, but no job failed and no worker logged "
                      "a traceback: drop the mark")


def wait_for_idle_queue(redis_url: str, queue_name: str) -> None:
    """Wait until `queue_name` holds no job and none of its workers is busy."""
    client = redis.Redis.from_url(redis_url)
    queue = Queue(queue_name, connection=client)
    wait_until(lambda: queue.count == 0 and all(
        w.get_state() != "busy" for w in Worker.all(queue=queue)), 60,
        message=f"the shared workers of {queue_name} to be idle with nothing queued")
    client.close()


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
