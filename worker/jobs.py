"""RQ job entry points: thin edges that take ids, build their dependencies and run the member."""

from __future__ import annotations

import logging
import os
import socket
import time

import redis

from shared.board import TaskBoard, WriteOutcome
from shared.bus import MessageBus, shorten
from shared.connection import same_server
from shared.llm import ModelClient
from shared.models import TaskState, Usage
from shared.prompts import render
from shared.runstore import RunStore
from shared.team import Member, RunSpec
from worker.dispatch import build_dispatch_input
from worker.heartbeat import Heartbeat
from worker.runner import AgentLoop, AttemptAbandoned
from worker.tools import Toolbox

log = logging.getLogger(__name__)
_hinted = False


def run_task(run_id: str, task_id: str) -> str:
    """Claim and execute one task of a run; a job whose claim fails exits quietly."""
    _hint_if_not_preloaded()
    from rq import get_current_job

    job = get_current_job()
    conn = same_server(job.connection, decode=True) if job else _conn_from_env()
    return execute_task(conn, run_id, task_id)


def execute_task(conn: redis.Redis, run_id: str, task_id: str) -> str:
    """The job body without RQ: claim, run the member, write the outcome with the token."""
    store = RunStore(conn, run_id)
    spec = store.spec()
    board = TaskBoard(conn, run_id)
    task = board.get(task_id)
    member = spec.member_for(task.member_id) if task else None
    if task is None or member is None:
        return "skipped: unknown task or member"
    token = board.claim(task_id, member.id, worker_name(), spec.options.heartbeat_ttl_s)
    if token is None:
        return "skipped: not ready (already claimed or finished)"
    bus = MessageBus(conn, run_id, [m.id for m in spec.members],
                     enabled=spec.options.enable_message_bus,
                     max_message_bytes=spec.options.max_message_bytes)
    attempt = _Attempt(conn, spec, board, bus, store, member, token)
    return attempt.run(task)


def worker_name() -> str:
    """host:pid of this process, recorded on the claim so a person can find it."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Attempt:
    """One claimed attempt at a task."""

    def __init__(self, conn: redis.Redis, spec: RunSpec, board: TaskBoard, bus: MessageBus,
                 store: RunStore, member: Member, token: int) -> None:
        self.conn, self.spec, self.board, self.bus, self.store = conn, spec, board, bus, store
        self.member = member
        self.token = token
        self.usage = Usage()

    def run(self, task: TaskState) -> str:
        started = time.monotonic()
        options = self.spec.options
        self.bus.publish("system", self.member.id, "task.assigned", task.task_id, task.task)
        with Heartbeat(self.board, task.task_id, self.token, options.heartbeat_ttl_s) as beat:
            loop = self._loop(beat)
            try:
                result = loop.run(render("worker", "member_system.md",
                                         name=self.member.display_name),
                                  self._dispatch_input(task))
            except AttemptAbandoned as exc:
                return f"abandoned: {exc}"
            except Exception as exc:  # any member failure becomes the task's error
                return self._fail(task, str(exc) or type(exc).__name__, started)
        return self._complete(task, result.output, started)

    def _loop(self, beat: Heartbeat) -> AgentLoop:
        options = self.spec.options

        def check_continue() -> None:
            if beat.lost.is_set():
                raise AttemptAbandoned("claim lost")
            if self.store.cancelled():
                raise AttemptAbandoned("run cancelled")

        def on_usage(usage: Usage) -> None:
            self.usage = self.usage.plus(usage)
            self.store.add_usage(usage)

        return AgentLoop(
            client=ModelClient(timeout_s=options.model_timeout_s,
                               max_retries=options.model_max_retries),
            model=self.spec.models.for_member(self.member), api_base=self.spec.models.api_base,
            toolbox=Toolbox(), max_steps=options.member_max_steps,
            check_continue=check_continue, on_usage=on_usage)

    def _dispatch_input(self, task: TaskState) -> str:
        options = self.spec.options
        dependencies = [d for d in (self.board.get(dep) for dep in task.depends_on) if d]
        history = self.bus.history_for(self.member.id, options.message_history_limit)
        return build_dispatch_input(member=self.member, task=task, objective=self.spec.objective,
                                    options=options, dependencies=dependencies, history=history)

    def _complete(self, task: TaskState, output: str, started: float) -> str:
        outcome = self.board.complete(task.task_id, self.token, output, _ms_since(started),
                                      self.usage)
        if outcome is WriteOutcome.STALE:
            return "stale: the claim was reclaimed; result discarded"
        self.bus.publish(self.member.id, "lead", "task.result", task.task_id, shorten(output))
        return "completed"

    def _fail(self, task: TaskState, error: str, started: float) -> str:
        outcome = self.board.fail(task.task_id, self.token, error, _ms_since(started), self.usage)
        if outcome is WriteOutcome.STALE:
            return "stale: the claim was reclaimed; error discarded"
        self.bus.publish(self.member.id, "lead", "task.error", task.task_id, error)
        return "failed"


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _conn_from_env() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)


def _hint_if_not_preloaded() -> None:
    global _hinted
    if not _hinted and os.environ.get("TEAMCTL_PRELOADED") != "1":
        _hinted = True
        log.warning("worker not preloaded: each task re-imports litellm (~3 s). "
                    "Start workers with `rq worker -c worker.settings members`.")
