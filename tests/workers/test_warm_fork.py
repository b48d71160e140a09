"""WarmForkWorker (teamctl's default worker, worker/warm_fork.py) keeps RQ's fork isolation: every
job of no run or team runs in a process of its own, forked by the worker (a run's tasks may share
one: test_kept_process.py); the process it keeps ready for the next job warms up only while no job
waits, and goes away with the worker, whether it stops or is SIGKILLed."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job
from teamctl.coordinator.local_workers.processes import stop_process

from tests.support.waiting import wait_until
from tests.support.workers import children, exited, warm_fork_worker


def run_all(queue: Queue, functions: list[str]) -> list[int]:
    """Enqueue the jobs, wait until each finished, return their results."""
    jobs = [queue.enqueue(fn) for fn in functions]
    wait_until(
        lambda: all(
            Job.fetch(j.id, connection=queue.connection).get_status() == "finished" for j in jobs
        ),
        60,
        message="the jobs to finish",
    )
    return [Job.fetch(j.id, connection=queue.connection).return_value() for j in jobs]


def test_each_job_runs_in_a_process_of_its_own_forked_by_the_worker(
    redis_server: str, tmp_path: Path
) -> None:
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    with warm_fork_worker(redis_server, name, tmp_path / "worker.log") as worker:
        pids = run_all(queue, ["os.getpid"] * 4)
        parents = run_all(queue, ["os.getppid"] * 2)

        assert len(set(pids)) == 4 and worker.pid not in pids
        assert parents == [worker.pid, worker.pid]
        # One process waits for the next job, ready; the jobs' own processes are gone.
        wait_until(
            lambda: len(children(worker.pid)) == 1,
            30,
            message="one process kept ready for the next job",
        )
        assert not children(worker.pid) & set(pids)


def test_the_process_kept_for_the_next_job_goes_with_the_worker(
    redis_server: str, tmp_path: Path
) -> None:
    for how in ("stopped", "killed"):
        name = f"q-{uuid.uuid4().hex[:8]}"
        queue = Queue(name, connection=redis.Redis.from_url(redis_server))
        with warm_fork_worker(redis_server, name, tmp_path / f"{how}.log") as worker:
            (job_pid,) = run_all(queue, ["os.getpid"])
            # Until the job's own process has gone, it is a child too: the spare is the other.
            wait_until(
                lambda worker=worker, job_pid=job_pid: (
                    len(children(worker.pid) - {job_pid}) == 1
                    and job_pid not in children(worker.pid)
                ),
                30,
                message="one process kept ready for the next job",
            )
            (spare,) = children(worker.pid)
            if how == "killed":
                os.kill(worker.pid, signal.SIGKILL)
                worker.wait(timeout=30)
            else:
                stop_process(worker, timeout_s=30)
            wait_until(
                lambda spare=spare: exited(spare),
                30,
                message=f"the spare of a {how} worker to exit",
            )


WARM_UP_FAULTS = 2000
"""Page faults a warm-up adds to a process at least: its model call through litellm copies
~4,000 of the parent's pages (a cold job process takes ~1,000 to ~2,000 to run a no-op)."""


def faults_of_jobs(queue: Queue, jobs: list[tuple[str, tuple[object, ...]]]) -> list[int]:
    """Enqueue the jobs at once (one transaction: the worker sees them all queued); each job's
    process's page faults when its job ran (the jobs are `resource.getrusage(RUSAGE_SELF)`, or
    anything else, which reports -1)."""
    enqueued = queue.enqueue_many([Queue.prepare_data(fn, args) for fn, args in jobs])
    wait_until(
        lambda: all(
            Job.fetch(j.id, connection=queue.connection).get_status() == "finished"
            for j in enqueued
        ),
        60,
        message="the jobs to finish",
    )
    results = [Job.fetch(j.id, connection=queue.connection).return_value() for j in enqueued]
    return [r.ru_minflt if hasattr(r, "ru_minflt") else -1 for r in results]


def faults(pid: int) -> int:
    """The minor page faults of process `pid` so far (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])
    except OSError:
        return 0


def warm_spare(worker_pid: int) -> bool:
    """The worker's one child is its spare, and it has warmed up (its copies taken)."""
    spares = children(worker_pid)
    return len(spares) == 1 and faults(next(iter(spares))) > WARM_UP_FAULTS


def done_warming(worker_pid: int) -> Callable[[], bool]:
    """A condition for wait_until: the worker's spare is warm, and its faults did not move
    over three polls (its warm-up is over, not under way)."""
    seen: list[tuple[int, int]] = []

    def settled() -> bool:
        spares = children(worker_pid)
        if len(spares) != 1:
            return False
        (spare,) = spares
        seen.append((spare, faults(spare)))
        return seen[-1][1] > WARM_UP_FAULTS and seen[-3:] == [seen[-1]] * 3

    return settled


def test_the_spare_warms_up_while_the_worker_is_idle_and_not_while_jobs_wait(
    redis_server: str, tmp_path: Path
) -> None:
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    rusage = ("resource.getrusage", (0,))  # RUSAGE_SELF: the job process's own faults
    with warm_fork_worker(redis_server, name, tmp_path / "worker.log") as worker:
        # The worker was idle: the first job runs in a warmed process. The second waited in
        # the queue while the first ran, so its spare was never told to warm up; the third
        # arrives once the worker waits idle again.
        # Each job comes once the spare is done warming: one that finds it still warming
        # (slow at its lower priority on a busy machine) is forked after READY_WAIT_S, and the
        # spare, warm by then, takes the next.
        wait_until(done_warming(worker.pid), 30, interval_s=0.1, message="a warm spare")
        (idle,) = faults_of_jobs(queue, [rusage])
        wait_until(done_warming(worker.pid), 30, interval_s=0.1, message="a spare done warming")
        _, queued = faults_of_jobs(queue, [("time.sleep", (1,)), rusage])
        wait_until(done_warming(worker.pid), 30, interval_s=0.1, message="a warm spare again")
        (idle_again,) = faults_of_jobs(queue, [rusage])

    assert queued > 0
    assert idle > queued + WARM_UP_FAULTS
    assert idle_again > queued + WARM_UP_FAULTS


def test_a_spare_forked_with_no_job_queued_warms_up_while_the_job_before_it_runs(
    redis_server: str, tmp_path: Path
) -> None:
    """A job queued while the one before it runs, as a teammate's wake sent the moment its turn
    ended, finds its spare warm: nothing waited when that job was handed over."""
    name = f"q-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, connection=redis.Redis.from_url(redis_server))
    with warm_fork_worker(redis_server, name, tmp_path / "worker.log") as worker:
        wait_until(done_warming(worker.pid), 30, interval_s=0.1, message="a warm spare")
        (horse,) = children(worker.pid)  # the spare that takes the running job
        running = queue.enqueue("time.sleep", 10)
        wait_until(lambda: running.get_status(refresh=True) == "started", 30, message="a start")
        # Queued once the next spare warms: a job queued before the worker looked at its
        # queues would be one that waited at the hand-over.
        wait_until(
            lambda: any(faults(pid) > WARM_UP_FAULTS for pid in children(worker.pid) - {horse}),
            9,
            message="the next spare to warm up beside the running job",
        )
        assert running.get_status(refresh=True) == "started"  # warmed beside it, not after it
        (behind,) = faults_of_jobs(queue, [("resource.getrusage", (0,))])

    assert behind > WARM_UP_FAULTS
