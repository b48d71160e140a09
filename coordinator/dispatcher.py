"""Puts ready tasks on RQ queues; jobs carry only the run id and the task id."""

from __future__ import annotations

import redis
from rq import Queue

from shared.team import RunSpec

JOB_TIMEOUT_MARGIN_S = 60
FAILURE_TTL_S = 86_400


class Dispatcher:
    """Enqueues `worker.jobs.run_task` on the member's queue (by name: no worker import here)."""

    def __init__(self, rq_conn: redis.Redis, spec: RunSpec) -> None:
        self.rq_conn = rq_conn
        self.spec = spec
        self._queues: dict[str, Queue] = {}

    def enqueue(self, task_id: str, queue_name: str) -> None:
        queue = self._queues.get(queue_name)
        if queue is None:
            queue = self._queues[queue_name] = Queue(queue_name, connection=self.rq_conn)
        # RQ's default job_timeout (180 s) is far too short for agent tasks; results live on the
        # board, so RQ need not keep them.
        queue.enqueue("worker.jobs.run_task", self.spec.run_id, task_id,
                      job_timeout=int(self.spec.options.timeout_s) + JOB_TIMEOUT_MARGIN_S,
                      result_ttl=0, failure_ttl=FAILURE_TTL_S)
