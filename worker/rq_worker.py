"""teamctl's RQ worker class: RQ's forking worker that gives up on a Redis gone for good.

RQ's own loop retries a lost Redis for ever, so a worker whose server was stopped (or whose
state dir was deleted) stayed alive for hours: `--max-idle-time` never fires while it cannot
dequeue, and its warm shutdown waited on the dead server to register its death. This worker
exits once Redis has been unreachable for TEAMCTL_REDIS_OUTAGE_S (60 s by default: the retry
window of its connection class, shared/redis/connection.py), and its teardown spends at most
TEARDOWN_OUTAGE_S on Redis.

It also keeps MCP sessions warm across jobs, each run in a forked process: before its first
job that may start an MCP server it forks an MCP keeper (worker/mcp_warm), and its teardown
stops it.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from rq.exceptions import StopRequested
from rq.worker import Worker
from teamctl.shared.redis.connection import (
    DEFAULT_OUTAGE_S,
    OutageRetry,
    outage_of,
    read_only_refusal,
)
from teamctl.shared.settings import load_settings
from teamctl.shared.teams.teammates import TURN_FUNCTION
from teamctl.shared.workspace.private_home import remove_orphan_homes
from teamctl.worker.mcp_warm.process import KeeperProcess
from teamctl.worker.preload import preload_rest_in_worker, rest_pending
from teamctl.worker.priority import lower_priority

MCP_JOBS = frozenset(
    {
        "teamctl.worker.jobs.run_task",
        "teamctl.worker.jobs.run_mcp_listing",
        TURN_FUNCTION,
    }
)
"""The jobs that may start MCP servers (by the names teamctl enqueues them under)."""
TEARDOWN_OUTAGE_S = 2.0
"""How long a stopping worker keeps trying to tell Redis it stopped (its key expires anyway)."""


class Outage:
    """How long Redis has been unreachable, as seen by one worker's idle loop."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.since: float | None = None

    def failed(self, already_s: float) -> bool:
        """Note a failed command that had already retried for `already_s`; True once the
        outage has lasted `limit_s`."""
        now = time.monotonic()
        if self.since is None:
            self.since = now - already_s
        return now - self.since >= self.limit_s

    def ended(self) -> None:
        self.since = None


class TeamctlWorker(Worker):
    """RQ's Worker that exits after `redis_outage_s` without Redis and stops promptly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outage = Outage(_retry_window_s(self.connection) or DEFAULT_OUTAGE_S)
        self.mcp_keeper: KeeperProcess | None = None
        """Where this worker's jobs keep MCP sessions warm (forked before its first job that
        may start MCP servers)."""

    def execute_job(self, job: Any, queue: Any) -> None:
        """RQ's job execution; before a job that may start MCP servers, the MCP keeper is
        forked (again, if it died): a worker that never runs one has no keeper."""
        if job.func_name in MCP_JOBS:
            self._ensure_mcp_keeper()
        super().execute_job(job, queue)

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        """RQ's fork of the job's process; then, in a run's first worker, the rest of the
        preload it skipped to be ready sooner, while this job runs (once)."""
        super().fork_work_horse(job, queue)
        self._finish_preload()

    _preload_tried = False

    def _preload_pending(self) -> bool:
        """Whether this worker still has the rest of its preload (and its niceness) to do."""
        return not self._preload_tried and rest_pending()

    def _finish_preload(self) -> bool:
        """The rest of the preload, if this worker skipped it (a run's first worker), and its
        lower priority, which it kept until now for the planner's job a cold run waits on.
        Whether it ran; once only, and a failure costs no job (they import what they need)."""
        if not self._preload_pending():
            return False
        self._preload_tried = True
        try:
            lower_priority(load_settings().worker_nice)
            preload_rest_in_worker()
        except Exception:  # an optimisation only: the job in hand must not pay for it
            self.log.warning(
                "Worker %s: the rest of the preload failed; jobs import what they use",
                self.name,
                exc_info=True,
            )
        return True

    def _ensure_mcp_keeper(self) -> None:
        if self.mcp_keeper is None:
            self.mcp_keeper = KeeperProcess(self.connection, load_settings().state_dir)
        try:
            self.mcp_keeper.ensure(in_child=self._in_mcp_keeper)
        except OSError as exc:  # jobs then run their MCP servers per attempt, as before
            self.log.warning("Worker %s: MCP keeper not started: %s", self.name, exc)

    def _in_mcp_keeper(self) -> None:
        """What the keeper does first, once forked: nothing here (a subclass closes its ends
        of its other children's pipes)."""

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        """RQ's heartbeat, which its idle loop calls first on every pass: the place to see
        that Redis has been gone too long (RQ itself would retry for ever). Its three
        commands go in one round trip: the worker beats several times between two jobs."""
        if pipeline is not None:
            super().heartbeat(timeout, pipeline)
            return None
        with self._exit_after_outage(), self.connection.pipeline(transaction=False) as beat:
            super().heartbeat(timeout, beat)
            beat.execute()
        return None

    def check_for_suspension(self, burst: bool) -> None:
        """RQ's suspension check, which `work()` runs before each dequeue, outside the retry
        loop: an outage here must not end the worker as an "unhandled exception"."""
        with self._exit_after_outage(retried_by_rq=False):
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        """RQ's registry cleaning, which `work()` also runs outside the dequeue retry loop (as
        it starts, then every maintenance interval); then the private homes of this host's
        killed jobs go."""
        with self._exit_after_outage(retried_by_rq=False):
            super().run_maintenance_tasks()  # type: ignore[no-untyped-call]  # RQ leaves it unannotated
        for home in remove_orphan_homes(Path(tempfile.gettempdir())):
            self.log.info("Worker %s: removed %s, left by a killed process", self.name, home)

    @contextmanager
    def _exit_after_outage(self, *, retried_by_rq: bool = True) -> Iterator[None]:
        """Turn a lost Redis into a stop once the outage has lasted `outage.limit_s`. A
        shorter one is re-raised where RQ's dequeue loop retries it, else skipped (the
        dequeue that follows meets it and retries)."""
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            # A read-only server (a primary demoted by a failover, still behind the URL) is an
            # outage too: the connection retried it for the whole window (OutageRetry).
            if isinstance(exc, redis.ResponseError) and not read_only_refusal(exc):
                raise
            if self.outage.failed(_retry_window_s(self.connection)):
                self.log.error(
                    "Worker %s: Redis %s for %g s (TEAMCTL_REDIS_OUTAGE_S); exiting",
                    self.name,
                    "read-only" if isinstance(exc, redis.ResponseError) else "unreachable",
                    self.outage.limit_s,
                )
                raise StopRequested() from None
            if retried_by_rq and isinstance(exc, redis.ResponseError):
                # RQ's dequeue loop retries only connection errors: one it retries, then.
                raise redis.ConnectionError(str(exc)) from exc
            if retried_by_rq:
                raise
            self.log.warning("Worker %s: Redis unreachable (%s); retrying", self.name, exc)
            return
        self.outage.ended()

    def teardown(self) -> None:
        """RQ's teardown (register the death, unsubscribe) with a short retry: a worker
        stopping during an outage must not wait the whole outage to say it stopped. The MCP
        keeper stops first, closing every warm session."""
        if self.is_horse:
            super().teardown()  # type: ignore[no-untyped-call]  # RQ leaves it unannotated
            return
        if self.mcp_keeper is not None:
            self.mcp_keeper.stop()
        # RQ's SIGTERM handler raises StopRequested wherever an idle worker is, and one raised
        # between a pipeline's sending and its reading leaves unread replies on a pooled
        # connection: registering the death on it would read them as its own.
        self.connection.connection_pool.disconnect(inuse_connections=False)
        self.connection.set_retry(OutageRetry(TEARDOWN_OUTAGE_S))
        try:
            super().teardown()  # type: ignore[no-untyped-call]  # RQ leaves it unannotated
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            self.log.warning("Worker %s: could not record its stop in Redis (%s)", self.name, exc)


def _retry_window_s(conn: redis.Redis) -> float:
    """How long a command of `conn` retries before failing (0 for redis-py's count-based
    retry, which gives up within seconds)."""
    return outage_of(conn, default_s=0.0)
