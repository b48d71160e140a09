"""One setting makes a complete worker: `RQ_CONFIG=teamctl.worker.settings rq worker`, and nothing
else, finds the Redis teamctl uses, gets teamctl's worker and connection classes, rides out a
Redis restart while it watches a job, exits once Redis has been gone for TEAMCTL_REDIS_OUTAGE_S,
stops promptly when asked during an outage, and never takes a job for a run that is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from rq.utils import import_attribute
from teamctl.coordinator.local_workers.pool import WorkerPool
from teamctl.coordinator.local_workers.worker_hints import (
    NoWorkerHint,
    StartedWorker,
    StartingWorkers,
    no_worker_hint,
)
from teamctl.shared.process.parent_watch import PARENT_PID_ENV
from teamctl.shared.redis.connection import WORKER_CLASS, WORKER_CONNECTION_CLASS
from teamctl.shared.redis.embedded import EmbeddedRedis
from teamctl.worker.warm_fork import WarmForkWorker

from tests.support.llm import ScriptedLLM
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, timing_options
from tests.support.waiting import wait_until
from tests.support.workers import exited

RQ_VARIABLES = ("RQ_CONFIG", "RQ_CONNECTION_CLASS", "RQ_WORKER_CLASS", "RQ_REDIS_URL")
REGISTER_S = 180
"""How long an executed worker may take to import litellm and register: about 3 s alone, over
60 s once on a 2-core host running both tiers beside other work."""


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """A state dir whose embedded Redis runs; it and any pool are stopped by pid at the end."""
    root = tmp_path / "state"
    EmbeddedRedis(root / "redis").ensure()
    yield root
    WorkerPool(root / "pool", root / "logs").stop()
    EmbeddedRedis(root / "redis").stop()


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Workers a test starts; SIGKILLed by pid if still running at its end."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def only_rq_config(state: Path, **extra: str) -> dict[str, str]:
    """This environment with RQ_CONFIG as the one worker setting (no URL, no class)."""
    env = {k: v for k, v in os.environ.items() if k not in RQ_VARIABLES and k != "REDIS_URL"}
    return {**env, "RQ_CONFIG": "teamctl.worker.settings", "TEAMCTL_STATE_DIR": str(state), **extra}


def start_worker(
    env: dict[str, str],
    log: Path,
    started: list[subprocess.Popen[bytes]],
    prefix: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """`rq worker` with no queue named and no flag, its output in `log`; `prefix`: a command
    that executes it (`nice -n 15`)."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "rq.cli", "worker"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    started.append(process)
    return process


def registered(url: str, pid: int) -> bool:
    conn = redis.Redis.from_url(url)
    return pid in {w.pid for w in Worker.all(queue=Queue("members", connection=conn))}


def listening(url: str, pid: int) -> bool:
    """The worker is past its start-up and waits on its queue (RQ marks it idle there)."""
    conn = redis.Redis.from_url(url)
    return any(
        w.pid == pid and w.get_state() == "idle"
        for w in Worker.all(queue=Queue("members", connection=conn))
    )


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_rq_config_alone_finds_the_embedded_redis_with_teamctls_classes(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    url = EmbeddedRedis(state / "redis").ensure()
    worker = start_worker(only_rq_config(state), tmp_path / "worker.log", started)

    wait_until(
        lambda: registered(url, worker.pid),
        REGISTER_S,
        message="the worker to register on members of the embedded Redis",
    )
    # The same process (same pid), started again with the two classes set.
    env = environ_of(worker.pid)
    assert (env["RQ_CONNECTION_CLASS"], env["RQ_WORKER_CLASS"]) == (
        WORKER_CONNECTION_CLASS,
        WORKER_CLASS,
    )
    assert worker.poll() is None
    assert import_attribute(WORKER_CLASS) is WarmForkWorker


def test_a_class_the_person_chose_is_kept(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    url = EmbeddedRedis(state / "redis").ensure()
    chosen = "teamctl.worker.rq_worker.TeamctlWorker"
    worker = start_worker(
        only_rq_config(state, RQ_WORKER_CLASS=chosen), tmp_path / "w.log", started
    )

    wait_until(lambda: registered(url, worker.pid), REGISTER_S, message="the worker to register")
    env = environ_of(worker.pid)
    assert (env["RQ_CONNECTION_CLASS"], env["RQ_WORKER_CLASS"]) == (WORKER_CONNECTION_CLASS, chosen)


def test_a_worker_runs_its_jobs_below_the_processes_a_run_waits_on(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """Niceness 10 once preloaded (TEAMCTL_WORKER_NICE), its jobs with it; 0 keeps the
    niceness it started with, and a worker started nicer keeps its own."""
    url = EmbeddedRedis(state / "redis").ensure()
    start = os.getpriority(os.PRIO_PROCESS, 0)
    default = start_worker(only_rq_config(state), tmp_path / "default.log", started)
    wait_until(lambda: listening(url, default.pid), REGISTER_S, message="the worker to listen")
    job = Queue("members", connection=redis.Redis.from_url(url)).enqueue(
        "os.getpriority", os.PRIO_PROCESS, 0
    )
    wait_until(lambda: job.get_status(refresh=True) == "finished", 60, message="the job to end")

    assert job.return_value() == max(10, start)
    assert os.getpriority(os.PRIO_PROCESS, default.pid) == max(10, start)

    kept = start_worker(
        only_rq_config(state, TEAMCTL_WORKER_NICE="0"), tmp_path / "kept.log", started
    )
    nicer = start_worker(
        only_rq_config(state), tmp_path / "nicer.log", started, prefix=("nice", "-n", "15")
    )
    for worker in (kept, nicer):
        wait_until(lambda: listening(url, worker.pid), REGISTER_S, message="the worker to listen")  # noqa: B023

    assert os.getpriority(os.PRIO_PROCESS, kept.pid) == start
    assert os.getpriority(os.PRIO_PROCESS, nicer.pid) == max(10, min(start + 15, 19))


def test_a_worker_exits_once_redis_is_gone_for_its_outage_bound(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    url = EmbeddedRedis(state / "redis").ensure()
    outage_s = scaled(60, 2.0)
    log = tmp_path / "worker.log"
    worker = start_worker(
        only_rq_config(state, TEAMCTL_REDIS_OUTAGE_S=f"{outage_s:g}"), log, started
    )
    # Once listening: Redis gone during start-up is a failed start (exit 1), not an outage.
    wait_until(lambda: listening(url, worker.pid), 60, message="the worker to listen")

    assert EmbeddedRedis(state / "redis").stop()

    code = worker.wait(timeout=outage_s + 60)
    text = log.read_text()
    assert code == 0, text
    assert f"Redis unreachable for {outage_s:g} s (TEAMCTL_REDIS_OUTAGE_S); exiting" in text, text


def test_sigterm_during_an_outage_stops_the_worker_promptly(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    """At the default outage bound (60 s) a stop request must not wait it out."""
    url = EmbeddedRedis(state / "redis").ensure()
    log = tmp_path / "worker.log"
    worker = start_worker(only_rq_config(state), log, started)
    # Once listening: before that, RQ has not installed its signal handlers.
    wait_until(lambda: listening(url, worker.pid), 60, message="the worker to listen")
    assert EmbeddedRedis(state / "redis").stop()  # returns once the server's process is gone

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(timeout=15) == 0  # the teardown's Redis calls give up within 2 s
    assert "could not record its stop in Redis" in log.read_text()


def test_a_stop_that_cut_a_pipeline_short_still_records_the_worker_s_death(
    redis_url: str,
) -> None:
    """RQ's SIGTERM handler raises wherever an idle worker is: one raised between a pipeline's
    sending and its reading leaves a reply unread on a pooled connection. The teardown's own
    pipeline must not read it as its own (it failed with a ResponseError, exit 1)."""
    conn = redis.Redis.from_url(redis_url)
    worker = WarmForkWorker([Queue("cut-short", connection=conn)], connection=conn)
    worker.register_birth()
    cut_short = conn.connection_pool.get_connection()
    cut_short.send_command("PING")  # sent, its reply never read
    conn.connection_pool.release(cut_short)

    worker.teardown()

    assert worker.name not in {w.name for w in Worker.all(connection=conn)}
    assert conn.hget(worker.key, "death")


def test_a_worker_whose_run_is_already_gone_exits_before_taking_a_job(
    state: Path, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    url = EmbeddedRedis(state / "redis").ensure()
    log = tmp_path / "worker.log"
    worker = start_worker(only_rq_config(state, **{PARENT_PID_ENV: str(gone.pid)}), log, started)

    assert worker.wait(timeout=60) == 0
    assert (
        f"the teamctl run that started this worker (pid {gone.pid}) is gone; exiting"
        in log.read_text()
    )
    assert not registered(url, worker.pid)


@pytest.mark.realistic
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_worker_with_only_rq_config_rides_out_a_redis_restart_mid_job(
    llm: ScriptedLLM,
    state: Path,
    tmp_path: Path,
    run_id: str,
    started: list[subprocess.Popen[bytes]],
    signum: int,
) -> None:
    """At the default options, with a model call of several seconds in flight, the embedded
    Redis is stopped (SIGTERM, or SIGKILL) and started again: the worker (started with
    RQ_CONFIG alone) and the run both carry on, and the run completes."""
    server = EmbeddedRedis(state / "redis")
    url = server.ensure()
    worker = start_worker(only_rq_config(state), tmp_path / "worker.log", started)
    wait_until(lambda: registered(url, worker.pid), REGISTER_S, message="the worker to register")
    plan = [{"id": "a", "memberId": "m1", "task": "A"}]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        # Long enough at any scale to restart Redis while the call is in flight.
        "member": llm.script(f"member-{run_id}", handler=member_answer, latency_s=scaled(8, 4.0)),
        "synth": llm.script(f"synth-{run_id}", ["the answer"]),
    }
    # A heartbeat of 10 s at least: a SIGKILLed Redis loses up to 1 s of writes (appendfsync
    # everysec), which must not make a claim look expired at the fast time scale.
    team = team_file(
        tmp_path / "team.toml", models, options=timing_options(heartbeat_ttl_s=scaled(30, 10.0))
    )
    env = {**only_rq_config(state), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    env.pop("RQ_CONFIG")
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "teamctl",
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    started.append(run)
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 1,
        120,
        message="the member's model call to be in flight",
    )

    pid = int((state / "redis" / "redis.pid").read_text())
    os.kill(pid, signum)
    wait_until(lambda: exited(pid), 30, message="the embedded Redis to stop")
    assert server.start() == url

    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err.decode()
    result = json.loads(out)
    assert (result["status"], result["output"]) == ("completed", "the answer")
    assert [s["attempts"] for s in result["task_states"]] == [1]
    assert worker.poll() is None and registered(url, worker.pid)


def test_a_wait_on_several_queues_gives_each_hint_once(redis_url: str, tmp_path: Path) -> None:
    """A wait re-checks every queue at each wake: each queue's hint is said once, and a queue
    whose worker still starts keeps the wait going without repeating the others'."""
    still_starting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        starting = StartingWorkers(
            [StartedWorker(still_starting.pid, None, ("slow",), str(tmp_path / "slow.log"))]
        )
        notes: list[str] = []
        hint = NoWorkerHint(redis.Redis.from_url(redis_url), starting, notes.append, "the run")

        for _ in range(3):
            assert [hint.check(queue) for queue in ("lonely", "slow")] == [True, False]

        assert notes == [
            no_worker_hint("lonely", "the run"),
            "waiting for 1 worker to start on queue slow (a worker preloads for 10-30 s)",
        ]
    finally:
        still_starting.kill()
        still_starting.wait(10)
