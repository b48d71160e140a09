"""Puts ready tasks and the coordinator's model calls on RQ queues; jobs carry only ids."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime

import redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.utils import utcparse
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.tracing import TRACEPARENT_META, Span

JOB_TIMEOUT_MARGIN_S = 60
FAILURE_TTL_S = 86_400
TOOL_CHECK_RESULT_TTL_S = 3_600
"""Long enough for a coordinator (or the one resuming it) to read the tool check's report."""
ENDED_JOB_STATUSES = frozenset(
    {JobStatus.FINISHED, JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED}
)


class Dispatcher:
    """Enqueues `teamctl.worker.jobs.run_task` on a member's queue (by name: no worker import)."""

    def __init__(self, rq_conn: redis.Redis, spec: RunSpec) -> None:
        self.rq_conn = rq_conn
        self.spec = spec
        self._queues: dict[str, Queue] = {}
        self.traceparent: str | None = None
        """The span the jobs enqueued now belong under (the phase or round enqueueing them);
        it goes in each job's meta, for the worker's spans."""

    @contextlib.contextmanager
    def under(self, span: Span) -> Iterator[Span]:
        """Enqueue the jobs of a `with` block under `span`."""
        before, self.traceparent = self.traceparent, span.traceparent
        try:
            yield span
        finally:
            self.traceparent = before

    def enqueue(self, task_id: str, queue_name: str) -> str:
        """Queue one task's job; returns the RQ job id."""
        return self._enqueue(queue_name, "teamctl.worker.jobs.run_task", task_id)

    def enqueue_call(self, call: str, attempt: int, queue_name: str) -> str:
        """Queue one attempt of a coordinator model call (planner, synthesizer); the job id."""
        return self._enqueue(queue_name, "teamctl.worker.jobs.run_model_call", call, attempt)

    def enqueue_mcp_listing(self, servers: list[str], queue_name: str) -> str:
        """Queue the job that lists MCP `servers` for the planner; the job id."""
        return self._enqueue(queue_name, "teamctl.worker.jobs.run_mcp_listing", servers)

    def enqueue_tool_check(self, queue_name: str) -> str:
        """Queue the job that imports the Python tools of the members on `queue_name`; its
        result (a ToolImportReport) is kept by RQ for TOOL_CHECK_RESULT_TTL_S."""
        return self._enqueue(
            queue_name,
            "teamctl.worker.jobs.run_tool_check",
            queue_name,
            result_ttl=TOOL_CHECK_RESULT_TTL_S,
        )

    def _enqueue(self, queue_name: str, function: str, *args: object, result_ttl: int = 0) -> str:
        queue = self._queues.get(queue_name)
        if queue is None:
            queue = self._queues[queue_name] = Queue(queue_name, connection=self.rq_conn)
        # RQ's default job_timeout (180 s) is far too short for agent tasks; results live in
        # the run's keys, so RQ need not keep them (but for the tool check's report).
        job = queue.enqueue(
            function,
            self.spec.run_id,
            *args,
            job_timeout=int(self.spec.options.timeout_s) + JOB_TIMEOUT_MARGIN_S,
            result_ttl=result_ttl,
            failure_ttl=FAILURE_TTL_S,
            meta={TRACEPARENT_META: self.traceparent} if self.traceparent else None,
        )
        return job.id

    def ended(self, job_ids: list[str], stale_after_s: float) -> set[str]:
        """The jobs that ended, vanished, or started `stale_after_s` ago without claiming their
        task (their worker died; RQ notices only after minutes). Their task needs a new job;
        enqueueing one more is always safe, since only one job can claim the task."""
        if not job_ids:
            return set()
        # Three fields of each job, not RQ's Job.fetch_many: that restores every field (a dozen
        # timestamps parsed per job), and the loop asks this for every queued job on every wake,
        # which was the coordinator's largest CPU cost per task.
        pipe = self.rq_conn.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(Job.key_for(job_id), "status", "started_at", "created_at")
        now = datetime.now(UTC)
        return {
            job_id
            for job_id, fields in zip(job_ids, pipe.execute(), strict=True)
            if _has_ended(*fields, now=now, stale_after_s=stale_after_s)
        }

    def failure(self, job_id: str) -> str | None:
        """The last line of a failed job's exception (RQ keeps failed jobs FAILURE_TTL_S);
        None when it did not fail or is gone."""
        job = Job.fetch_many([job_id], connection=self.rq_conn)[0]
        if job is None or job.get_status(refresh=False) != JobStatus.FAILED:
            return None
        text = (job.exc_info or "").strip()
        return text.splitlines()[-1] if text else "failed without a traceback"


def _has_ended(
    status: bytes | None,
    started_at: bytes | None,
    created_at: bytes | None,
    *,
    now: datetime,
    stale_after_s: float,
) -> bool:
    """A job hash's fields say it ended, vanished (no hash), or started too long ago."""
    if created_at is None:
        return True  # every job hash has created_at: this one is gone
    state = status.decode() if status else None
    if state in ENDED_JOB_STATUSES:
        return True
    if state != JobStatus.STARTED or not started_at:
        return False
    return (now - utcparse(started_at.decode())).total_seconds() > stale_after_s
