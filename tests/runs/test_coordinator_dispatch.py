"""The dispatcher: jobs carry ids only, and a job that ended without claiming is noticed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from rq.job import Job, JobStatus
from teamctl.coordinator.runs.dispatcher import Dispatcher
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore

from tests.support.runs import two_task_run


def test_a_job_that_ended_without_claiming_is_reported(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path, timeout_s=100)
    rq_conn = redis.Redis.from_url(redis_url)
    dispatcher = Dispatcher(rq_conn, RunStore(conn, RunKeys(run_id)).spec())
    job_id = dispatcher.enqueue("a", "nobody-listens")
    job = Job.fetch(job_id, connection=rq_conn)
    assert (job.func_name, job.args, job.timeout) == (
        "teamctl.worker.jobs.run_task",
        (run_id, "a"),
        160,
    )
    assert dispatcher.ended([job_id], stale_after_s=30) == set()
    job.cancel()
    assert dispatcher.ended([job_id, "no-such-job"], stale_after_s=30) == {job_id, "no-such-job"}


def test_a_job_started_longer_ago_than_the_stale_bound_is_reported_and_a_fresh_one_is_not(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path, timeout_s=100)
    rq_conn = redis.Redis.from_url(redis_url)
    dispatcher = Dispatcher(rq_conn, RunStore(conn, RunKeys(run_id)).spec())
    old, fresh = (dispatcher.enqueue(task, "nobody-listens") for task in ("a", "b"))
    now = datetime.now(UTC)
    for job_id, started_at in ((old, now - timedelta(seconds=45)), (fresh, now)):
        job = Job.fetch(job_id, connection=rq_conn)
        job.started_at = started_at
        job.set_status(JobStatus.STARTED)
        job.save()  # as a worker leaves a job it began (and then died holding)
    assert dispatcher.ended([old, fresh], stale_after_s=30) == {old}
    Job.fetch(fresh, connection=rq_conn).set_status(JobStatus.FINISHED)
    assert dispatcher.ended([old, fresh], stale_after_s=30) == {old, fresh}
