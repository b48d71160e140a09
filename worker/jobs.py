"""RQ job entry points: thin edges that take ids, build their dependencies and run the member."""

from __future__ import annotations

import functools
import logging
import os
import socket

import redis
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.python_tools import abandoned_tool_calls
from teamctl.shared.board import TaskBoard
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.log_lines import WORKER_DATE_FORMAT, WORKER_FORMAT, log_to_stderr
from teamctl.shared.providers.limits import worker_limits
from teamctl.shared.redis.connection import (
    DEFAULT_OUTAGE_S,
    client_from_url,
    decoded_beside,
    set_outage,
)
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.settings import Settings, load_settings
from teamctl.shared.tracing import (
    NO_TRACING,
    TRACEPARENT_META,
    WORKER_SERVICE,
    Tracing,
    tracing_from_settings,
)
from teamctl.worker.process_privacy import keep_environment_private
from teamctl.worker.runs.attempt import Attempt
from teamctl.worker.runs.claims import Claim, ClaimEnd, Claims
from teamctl.worker.runs.coordinator_call import CallTrace, execute_model_call
from teamctl.worker.runs.heartbeat import Heartbeat
from teamctl.worker.runs.job_context import JobContext
from teamctl.worker.runs.mcp_listing import execute_mcp_listing

log = logging.getLogger(__name__)
PRELOAD_MARKER = "TEAMCTL_PRELOADED"


def run_task(run_id: str, task_id: str) -> str:
    """Claim and execute one task of a run; a job whose claim fails exits quietly."""
    _bare_worker_setup()
    keep_environment_private()  # a bare `rq worker` did not: tools run in this job
    settings = load_settings()
    tracing = tracing_from_settings(settings, WORKER_SERVICE)
    try:
        return execute_task(
            job_connection(settings),
            run_id,
            task_id,
            settings=settings,
            tracing=tracing,
            traceparent=job_traceparent(),
        )
    finally:  # a forked job ends in os._exit: its spans go now or never
        tracing.close()


def run_model_call(run_id: str, call: str, attempt: int) -> str:
    """Make one of the coordinator's model calls (planner, synthesizer) with this worker's
    provider keys, and write its outcome back to the run."""
    _bare_worker_setup()
    settings = load_settings()
    tracing = tracing_from_settings(settings, WORKER_SERVICE)
    try:
        return execute_model_call(
            job_connection(settings),
            run_id,
            call,
            attempt,
            provider_keys=settings.provider_keys,
            worker=worker_name(),
            trace=CallTrace(tracing, job_traceparent()),
        )
    finally:  # a forked job ends in os._exit: its spans go now or never
        tracing.close()


def run_mcp_listing(run_id: str, servers: list[str]) -> str:
    """Start the run's MCP `servers`, cache their tool lists for the planner, stop them."""
    _bare_worker_setup()
    keep_environment_private()  # a bare `rq worker` did not: tools run in this job
    settings = load_settings()
    return execute_mcp_listing(job_connection(settings), run_id, servers, worker_name())


def run_tool_check(run_id: str, queue: str) -> str:
    """Import the Python tools of the run's members on `queue` as their tasks will; the
    ToolImportReport as JSON (RQ keeps it as the job's result for the coordinator)."""
    from teamctl.worker.runs.tool_check import check_member_tools

    _bare_worker_setup()
    spec = RunHandle(job_connection(load_settings()), run_id).spec
    return check_member_tools(spec, queue, rq_worker_name()).model_dump_json()


def job_traceparent() -> str | None:
    """The span this RQ job's work belongs under, as its enqueuer put it in the job's meta."""
    from rq import get_current_job

    job = get_current_job()
    value = job.meta.get(TRACEPARENT_META) if job else None
    return value if isinstance(value, str) else None


def job_connection(settings: Settings) -> redis.Redis:
    """A decoded client to the Redis of the RQ job being run (REDIS_URL outside a worker), at a
    fresh client's outage bound: the jobs of a kept process (or a SimpleWorker) share it, and a
    run's own bound (redis_outage_s) must not follow it into the next job."""
    from rq import get_current_job

    job = get_current_job()
    if job is None:
        return conn_from_settings(settings)
    conn = decoded_beside(job.connection)
    set_outage(conn, DEFAULT_OUTAGE_S)
    return conn


def execute_task(
    conn: redis.Redis,
    run_id: str,
    task_id: str,
    *,
    settings: Settings | None = None,
    tracing: Tracing = NO_TRACING,
    traceparent: str | None = None,
) -> str:
    """The job body without RQ: claim, run the member (and any task it claims), write outcomes.

    Without `settings` the process environment is not consulted: no provider key is known.
    Its attempts' spans go under `traceparent` (the dispatching round's), else the run's."""
    run = RunHandle(conn, run_id)
    spec = run.spec
    set_outage(conn, spec.options.redis_outage_s)
    board = run.board
    task = board.get(task_id)
    member = spec.member_for(task.member_id) if task else None
    if task is None or member is None:
        return "skipped: unknown task or member"
    options = spec.options
    token = board.claim(task_id, member.id, worker_name(), options.heartbeat_ttl_s)
    if token is None:
        return "skipped: not ready (already claimed or finished)"
    claims = Claims()
    claims.add(Claim(task_id, token, member.id))
    limits = worker_limits(conn, spec.limits, settings)
    client = LitellmClient(
        provider_keys=settings.provider_keys if settings else (),
        timeout_s=options.model_timeout_s,
        max_retries=options.model_max_retries,
        limits=limits,
    )
    with Heartbeat(board, claims, options.heartbeat_ttl_s) as beat:
        job = JobContext(
            run=run,
            client=client,
            claims=claims,
            beat=beat,
            worker=worker_name(),
            tracing=tracing,
            traceparent=traceparent or run_traceparent(run, tracing),
        )
        outcomes: list[str] = []
        while (claim := claims.next_to_run()) is not None:
            if outcomes and abandoned_tool_calls():
                outcomes.append(f"{claim.task_id}: {hand_back(board, claims, claim)}")
                continue
            outcomes.append(f"{claim.task_id}: {Attempt(job, claim).run().text()}")
    return "; ".join(outcomes)


def run_traceparent(run: RunHandle, tracing: Tracing) -> str | None:
    """The run's trace as its coordinator stored it (a job enqueued without one in its meta)."""
    return run.store.state().traceparent if tracing.on else None


HANDED_BACK_REASON = (
    "its job still runs a Python tool call abandoned after tool_timeout_s; a fresh job runs it"
)


def hand_back(board: TaskBoard, claims: Claims, claim: Claim) -> str:
    """Release a claim this job would run next beside an abandoned tool call's thread: a fresh
    job (a fresh work-horse, which the thread does not outlive) runs it instead."""
    if not claims.end(claim, ClaimEnd.RELEASED):
        return "skipped: no longer ours"
    outcome = board.release(claim.task_id, claim.token, HANDED_BACK_REASON)
    return f"released ({outcome.value})"


def worker_name() -> str:
    """host:pid of this process, recorded on the claim so a person can find it."""
    return f"{socket.gethostname()}:{os.getpid()}"


def rq_worker_name() -> str:
    """host:pid of the RQ worker running this job (its parent: each job runs in a process the
    worker forked), as `teamctl workers` lists it; this process's own outside a worker."""
    from rq import get_current_job

    return f"{socket.gethostname()}:{os.getppid() if get_current_job() else os.getpid()}"


def conn_from_settings(settings: Settings) -> redis.Redis:
    """Outside an RQ worker, REDIS_URL names the server."""
    if settings.redis_url is None:
        raise ConfigError("run_task outside an RQ worker needs REDIS_URL; set it")
    return client_from_url(settings.redis_url, decode_responses=True)


@functools.cache
def _bare_worker_setup() -> None:
    """In a worker started without teamctl's settings module: its printable log lines, and a
    hint to preload."""
    # Cached: once per process (a forked RQ horse is a fresh copy, so once per job there).
    if os.environ.get(PRELOAD_MARKER) != "1":
        # A bare `rq worker`: the settings module did not set up its printable log lines.
        log_to_stderr(WORKER_FORMAT, WORKER_DATE_FORMAT)
        log.warning(
            "worker not preloaded: each task re-imports litellm (~3 s). Start workers "
            "with `teamctl worker members` (the same as "
            "`RQ_CONFIG=teamctl.worker.settings rq worker members`)."
        )
