"""The default worker keeps a member task's process for the run's next task on it: a run's tasks
share that process one after another, another run's task never runs in it, and it goes once idle
for KEPT_IDLE_S, when killed, and with the worker."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import redis
from rq import Queue, SimpleWorker
from rq.job import Job
from rq.registry import FailedJobRegistry
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.connection import DEFAULT_OUTAGE_S
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.task_records import TaskSpec, TaskStatus
from teamctl.worker.warm_fork import KEPT_IDLE_S

from tests.support.llm import ScriptedLLM
from tests.support.runs import make_run
from tests.support.waiting import wait_until
from tests.support.workers import (
    children,
    reaped,
    spare_warmed,
    wait_for_idle_queue,
    warm_fork_worker,
)


def new_run(
    conn: redis.Redis, llm: ScriptedLLM, tmp_path: Path, tasks: int, latency_s: float = 0.0
) -> str:
    """A run of one member whose `tasks` independent tasks each answer "done"."""
    run_id = f"kept-{uuid.uuid4().hex[:10]}"
    model = llm.script(run_id, ["done"], repeat_last=True, latency_s=latency_s)
    make_run(
        conn,
        run_id,
        models={"m1": model},
        tasks=[TaskSpec(id=f"t{n}", member_id="m1", task="Say done") for n in range(tasks)],
        workspace=tmp_path / run_id,
        api_base=llm.api_base,
    )
    return run_id


def task_pid(conn: redis.Redis, queue: Queue, run_id: str, task_id: str) -> int:
    """Run one task as its coordinator would queue it; the pid of the process that ran it."""
    job = queue.enqueue("teamctl.worker.jobs.run_task", run_id, task_id)
    wait_until(
        lambda: Job.fetch(job.id, connection=queue.connection).get_status() == "finished",
        60,
        message=f"{run_id}/{task_id} to finish",
    )
    task = TaskBoard(conn, RunKeys(run_id)).get(task_id)
    assert task is not None and (task.status, task.output) == (TaskStatus.COMPLETED, "done")
    assert task.worker is not None
    return int(task.worker.rsplit(":", 1)[1])


def test_a_runs_tasks_share_one_process_and_another_runs_task_never_does(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    """On a server of the test's own, where the spare's warm-up is the one PING."""
    with throwaway_redis() as url:
        shares_and_never_crosses(url, llm, tmp_path)


def shares_and_never_crosses(url: str, llm: ScriptedLLM, tmp_path: Path) -> None:
    conn = redis.Redis.from_url(url, decode_responses=True)
    first, other = new_run(conn, llm, tmp_path, 4), new_run(conn, llm, tmp_path, 1)
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(url))
    with warm_fork_worker(url, name, tmp_path / "worker.log") as worker:
        spare_warmed(conn)  # else the first task may not wait for it, and is forked
        shared = [task_pid(conn, queue, first, f"t{n}") for n in range(3)]
        kept_meanwhile = shared[0] in children(worker.pid)
        spare_warmed(conn)  # the next spare, which the other run's task goes to
        others = task_pid(conn, queue, other, "t0")
        first_again = task_pid(conn, queue, first, "t3")
        noop = run_noop(queue)

    assert len(set(shared)) == 1 and worker.pid not in shared
    assert kept_meanwhile
    # The other run's task ran in a process of its own, which then replaced the first run's.
    assert others != shared[0]
    assert first_again not in (shared[0], others)
    assert noop not in (shared[0], others, first_again)


def test_a_kept_process_s_tasks_share_its_redis_connections(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A run's next task in the kept process opens no connection to Redis: its jobs share one
    client. A server of the test's own, which nothing else connects to meanwhile: the worker's
    spare warms up (its one command, a PING, on a connection of its own) before it is asked."""
    with throwaway_redis() as url:
        conn = redis.Redis.from_url(url, decode_responses=True)
        run_id = new_run(conn, llm, tmp_path, 3)
        name = f"q-{uuid.uuid4().hex[:8]}"
        queue = Queue(name, connection=redis.Redis.from_url(url))
        with warm_fork_worker(url, name, tmp_path / "worker.log"):
            spare_warmed(conn)  # else the first task may not wait for it, and is forked
            kept = [task_pid(conn, queue, run_id, f"t{n}") for n in range(2)]
            wait_for_idle_queue(url, name)
            spare_warmed(conn)  # the next spare, forked after the first task
            before = conn.info("stats")["total_connections_received"]
            kept.append(task_pid(conn, queue, run_id, "t2"))
            after = conn.info("stats")["total_connections_received"]

    assert len(set(kept)) == 1
    assert after == before


def test_a_runs_outage_bound_does_not_follow_the_shared_client_into_the_next_job(
    redis_server: str,
) -> None:
    """Jobs that share one client (a kept process's, a SimpleWorker's) each get it at a fresh
    client's bound, whatever redis_outage_s the job before set for its run."""
    conn = redis.Redis.from_url(redis_server)
    queue = Queue(f"outage-{uuid.uuid4().hex[:8]}", connection=conn)
    jobs = [queue.enqueue("tests.support.workers.outage_seen_then_set", 5.0) for _ in range(2)]

    SimpleWorker([queue], connection=conn).work(burst=True)

    assert [job.return_value() for job in jobs] == [DEFAULT_OUTAGE_S, DEFAULT_OUTAGE_S]


def run_noop(queue: Queue) -> int:
    """A job of no run: the pid it ran in."""
    job = queue.enqueue("os.getpid")
    wait_until(
        lambda: Job.fetch(job.id, connection=queue.connection).get_status() == "finished",
        60,
        message="a no-op job to finish",
    )
    pid = Job.fetch(job.id, connection=queue.connection).return_value()
    assert isinstance(pid, int)
    return pid


def test_a_kept_process_goes_once_idle_and_a_killed_one_is_replaced(
    redis_server: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run_id = new_run(conn, llm, tmp_path, 3)
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    with warm_fork_worker(redis_server, name, tmp_path / "worker.log") as worker:
        killed = task_pid(conn, queue, run_id, "t0")
        wait_for_idle_queue(redis_server, name)  # the worker has kept it, and waits
        os.kill(killed, signal.SIGKILL)  # the next job comes while it may still be exiting
        replaced = task_pid(conn, queue, run_id, "t1")  # the worker finds it gone: its spare
        idle = task_pid(conn, queue, run_id, "t2")
        assert idle == replaced != killed
        assert idle in children(worker.pid)
        wait_until(
            lambda: reaped(idle), KEPT_IDLE_S + 30, message="the kept process to exit once idle"
        )
        assert worker.poll() is None
        assert reaped(killed)
    assert FailedJobRegistry(queue=queue).get_job_ids() == []


def test_a_process_whose_job_failed_is_not_kept_and_long_jobs_are(
    redis_server: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """RQ's monitor wakes every second here, during tasks of 2.5 s: the process is kept all the
    same. A job of the run that then fails (its run's spec is gone) ends it."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    run_id = new_run(conn, llm, tmp_path, 3, latency_s=2.5)
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    with warm_fork_worker(
        redis_server, name, tmp_path / "worker.log", rq_options=("--job-monitoring-interval", "1")
    ):
        long_jobs = [task_pid(conn, queue, run_id, f"t{n}") for n in range(2)]
        conn.delete(RunKeys(run_id).spec)
        job = queue.enqueue("teamctl.worker.jobs.run_task", run_id, "t2")
        wait_until(lambda: job.get_status(refresh=True) == "failed", 60, message="a failed job")
        wait_until(lambda: reaped(long_jobs[0]), KEPT_IDLE_S / 2, message="its process to exit")

    assert long_jobs[0] == long_jobs[1]


def test_a_kept_process_goes_with_the_worker(
    redis_server: str, llm: ScriptedLLM, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    for how in ("stopped", "killed"):
        run_id = new_run(conn, llm, tmp_path, 1)
        with warm_fork_worker(redis_server, name, tmp_path / f"{how}.log") as worker:
            kept = task_pid(conn, queue, run_id, "t0")
            assert kept in children(worker.pid)
            if how == "killed":
                os.kill(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)
        wait_until(
            lambda kept=kept: reaped(kept), 30, message=f"the kept process of a {how} worker"
        )
