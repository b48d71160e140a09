"""teamctl's worker: RQ's forking worker whose job processes are forked before their jobs arrive.

A forked horse pays for every page of the parent it writes to (copy-on-write): ~4,000 pages,
about 15 ms, on a job's first model call through litellm, since calling code writes the reference
counts of the objects it touches; and forking a preloaded parent costs the worker several ms more
before the job starts. WarmForkWorker forks the next job's process (a spare) as soon as it hands a
job over, so the fork is off the next job's path. When its queues are empty, as it hands a job
over or is about to wait, it tells the spare to warm up: one model call to a loopback server and a
Redis connection, taking those page copies while no job waits. Warming only then keeps a busy
worker's CPU for its jobs. The job is handed over by id, as RQ's SpawnWorker does; the spare runs
it exactly as a freshly forked horse would (its own process group, the same signals), so each job
still has a process of its own. A job waits at most READY_WAIT_S for a spare that is not set up
yet, then forks as RQ does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.worker.base import SHUTDOWN_SIGNAL
from teamctl.worker.parent_death import die_with_parent
from teamctl.worker.rq_worker import TeamctlWorker

log = logging.getLogger(__name__)
READY_WAIT_S = 0.015
"""How long a job may wait for a spare that is not set up yet (just forked, on a busy machine),
or still warming up: about what forking a cold horse costs, so a spare that is nearly there
beats a new fork, and a warm-up that hangs (a loopback call sent to a proxy) delays no job."""
STALE_CONNECTION_S = 60.0
"""A spare's Redis connection idle longer than this is opened again for its job: a NAT or load
balancer may have dropped it silently, and its first command would wait out the socket timeout."""
HANDOVER_MAX_BYTES = 4096
"""A job's id, queue name and execution id, as JSON: far less than this."""
WARM = b"warm\n"
"""What the worker writes to an idle spare's pipe to have it warm up; a job is one JSON line."""
SET_UP, WARMED = b"1", b"2"
"""What a spare writes to `ready`: once set up, then once warm if it was told to warm up."""


@dataclass
class Spare:
    """A forked process waiting for its job: it writes to `ready` once set up; a line on `pipe`
    warms it or hands it a job, closing `pipe` ends it."""

    pid: int
    pipe: int
    ready: int
    warming: bool = False
    """Told to warm up (it then is, or soon will be)."""
    said: bytes = b""

    def takes_job(self, wait_s: float) -> bool:
        """Set up, and warm if told to warm up, within `wait_s` (or gone: the hand-over then
        fails and the job is forked)."""
        wanted = WARMED if self.warming else SET_UP
        deadline = time.monotonic() + wait_s
        while wanted not in self.said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.ready], [], [], left)[0]:
                return False
            said = os.read(self.ready, 16)
            if not said:
                return True
            self.said += said
        return True


class WarmForkWorker(TeamctlWorker):
    """teamctl's forking worker whose horses are forked before their jobs arrive, and warmed
    while no job waits."""

    _spare: Spare | None = None
    _burst = False

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        self._fork_spare()

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """RQ's wait for the next job; the spare warms up first if the queues are empty (not in
        burst mode, whose worker stops at the first empty dequeue, nor at its hand-overs)."""
        self._burst = timeout is None  # how RQ's loop asks in burst mode
        if not self._burst:
            self._warm_spare_if_queues_empty()
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def kill_horse(self, sig: signal.Signals = SHUTDOWN_SIGNAL) -> None:
        """RQ's kill of the job's process; none while a job is being handed over (RQ would
        signal the worker's own process group for a horse pid of 0)."""
        if self.horse_pid:
            super().kill_horse(sig)

    def execute_job(self, job: Job, queue: Queue) -> None:
        try:
            super().execute_job(job, queue)
        finally:
            if self._spare is None and not self._stop_requested:
                self._fork_spare()

    _keeper_failed = False

    def _ensure_mcp_keeper(self) -> None:
        """Fork the MCP keeper with no spare alive: a spare forked before it would not know
        where it is, and the keeper would hold the spare's pipe open. This job then forks as
        RQ does, and the next spare after it. A keeper that could not start costs no spare
        again: its jobs run their servers themselves, as they do when it is missing."""
        if not self._keeper_failed and (self.mcp_keeper is None or self.mcp_keeper.missing()):
            self._end_spare()
        super()._ensure_mcp_keeper()
        self._keeper_failed = self.mcp_keeper is None or self.mcp_keeper.missing()

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        """Hand the job to the spare, then fork the next spare while this job runs, and warm
        it up if no job waits. A job waits at most READY_WAIT_S for a spare that is not set up
        yet (or still warming up), and is then forked as RQ does (the spare kept for the next
        one)."""
        spare = self._spare
        if spare is not None and spare.takes_job(READY_WAIT_S):
            self._spare = None
            if self._hand_over(spare, job, queue):
                os.environ["RQ_WORKER_ID"] = self.name  # as RQ's fork_work_horse leaves them
                os.environ["RQ_JOB_ID"] = job.id
                self._horse_pid = spare.pid
                # RQ leaves procline unannotated.
                self.procline(f"Handed over to {spare.pid} at {time.time()}")  # type: ignore[no-untyped-call]
                self._finish_preload()  # before the next spare, which then inherits it
            else:
                super().fork_work_horse(job, queue)
        else:
            super().fork_work_horse(job, queue)
        if self._stop_requested:
            return
        if self._spare is None:
            self._fork_spare()
        if not self._burst:
            # Nothing else waiting: the next job may come the moment this one ends (a
            # teammate's wake, a task this one unblocks), with no idle wait to warm up in.
            self._warm_spare_if_queues_empty(at_hand_over=True)

    def _finish_preload(self) -> bool:
        """The rest of the preload (TeamctlWorker's), and then a spare forked before it gone:
        it would run its job without what the preload now holds."""
        ran = super()._finish_preload()
        if ran and self._spare is not None:
            self._end_spare()
        return ran

    def teardown(self) -> None:
        if not self.is_horse:
            self._end_spare()
        super().teardown()

    def _warm_spare_if_queues_empty(self, *, at_hand_over: bool = False) -> None:
        """Tell the spare to warm up when every queue is empty: no job waits for the CPU the
        warm-up takes. `at_hand_over`: a job runs, so Redis failing here only leaves the spare
        cold (after the connection's retries), and the worker meets the failure as the job
        ends; none is tried during an outage already known."""
        spare = self._spare
        if spare is None or spare.warming:
            return
        if at_hand_over:
            if self.outage.since is not None:
                return
            try:
                if any(self._queue_lengths()):
                    return
            except redis.RedisError:
                return
        else:
            # A Redis outage here counts as one at RQ's own checks: past its limit the worker
            # stops, shorter the spare stays cold and the dequeue meets the outage.
            with self._exit_after_outage(retried_by_rq=False):
                if any(self._queue_lengths()):
                    return
            if self.outage.since is not None:  # the lengths were not read
                return
        try:
            os.write(spare.pipe, WARM)
            spare.warming = True
        except OSError:  # the spare died (killed while waiting): the next job forks a new one
            self._end_spare()

    def _queue_lengths(self) -> list[int]:
        """How many jobs wait in each of this worker's queues (one round trip)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for queue in self.queues:
                pipe.llen(queue.key)
            return [int(n) for n in pipe.execute()]

    def _hand_over(self, spare: Spare, job: Job, queue: Queue) -> bool:
        payload = json.dumps([job.id, queue.name, self.execution.id]).encode() + b"\n"  # type: ignore[union-attr]
        try:
            if len(payload) >= HANDOVER_MAX_BYTES:  # a line the spare would cut: fork the job
                self._reap(spare)
                return False
            os.write(spare.pipe, payload)
            return True
        except OSError as exc:  # the spare died (killed while waiting): fork a horse instead
            self.log.warning("Worker %s: spare %s is gone (%s); forking", self.name, spare.pid, exc)
            self._reap(spare)
            return False
        finally:
            os.close(spare.pipe)
            os.close(spare.ready)

    def _fork_spare(self) -> None:
        """Fork the next job's process; without one (no process or memory left), jobs are
        forked as RQ forks them."""
        self._end_spare()
        job_read, job_write = os.pipe()
        ready_read, ready_write = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            for end in (job_read, job_write, ready_read, ready_write):
                os.close(end)
            self.log.warning("Worker %s: no spare process (%s); forking each job", self.name, exc)
            return
        if pid == 0:
            os.close(job_write)
            os.close(ready_read)
            self._run_spare(parent, job_read, ready_write)  # never returns
        os.close(job_read)
        os.close(ready_write)
        self._spare = Spare(pid, job_write, ready_read)

    def _end_spare(self) -> None:
        """Close the spare's pipes (it exits on end of file) and reap it."""
        spare, self._spare = self._spare, None
        if spare is not None:
            os.close(spare.pipe)
            os.close(spare.ready)
            self._reap(spare)

    def _reap(self, spare: Spare) -> None:
        with contextlib.suppress(OSError):
            os.kill(spare.pid, signal.SIGKILL)  # it may be warming up: no need to wait for it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(spare.pid, 0)

    def _run_spare(self, parent: int, pipe: int, ready: int) -> None:
        """The spare: a horse in waiting. Say it is set up, warm up when told, then run the job
        handed over, or exit when the worker closes the pipe without one (or dies: another
        fork of the worker may hold the pipe open)."""
        status = 1
        try:
            die_with_parent(parent)
            os.setpgrp()  # as RQ's horse: the worker's Ctrl+C is the worker's to handle
            self.setup_work_horse_signals()  # type: ignore[no-untyped-call]  # RQ: unannotated
            with contextlib.suppress(OSError):  # the worker may be gone already
                os.write(ready, SET_UP)
            warmed_s: float | None = None
            with os.fdopen(pipe, "rb") as lines:
                line = lines.readline(HANDOVER_MAX_BYTES)
                if line == WARM:
                    self._warm_up()
                    warmed_s = time.monotonic()
                    with contextlib.suppress(OSError):
                        os.write(ready, WARMED)
                    line = lines.readline(HANDOVER_MAX_BYTES)
            os.close(ready)
            if not line:  # the worker is stopping, or died
                status = 0
                return
            if warmed_s is not None and time.monotonic() - warmed_s > STALE_CONNECTION_S:
                self.connection.connection_pool.disconnect()
            job_id, queue_name, execution_id = json.loads(line)
            self._run_handed_over(job_id, queue_name, execution_id)  # exits the process
        except BaseException:  # noqa: BLE001  (a horse must exit, never return to the loop)
            with contextlib.suppress(Exception):
                self.log.exception("Worker %s: spare %s failed", self.name, os.getpid())
        finally:
            os._exit(status)

    def _warm_up(self) -> None:
        """Take the page copies and the Redis connection a job would otherwise pay for."""
        try:
            warm_horse()
            self.connection.ping()  # redis-py opens a new connection in a new process
        except Exception:  # a cold spare still runs its job as a forked horse would
            self.log.warning(
                "Worker %s: spare %s did not warm up", self.name, os.getpid(), exc_info=True
            )

    def _run_handed_over(self, job_id: str, queue_name: str, execution_id: str) -> None:
        """What RQ's fork_work_horse does in the child, for a job read back by id."""
        os.environ["RQ_WORKER_ID"] = self.name
        os.environ["RQ_JOB_ID"] = job_id
        job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
        queue = self.queue_class(
            queue_name,
            connection=self.connection,
            job_class=self.job_class,
            serializer=self.serializer,
            death_penalty_class=self.death_penalty_class,
        )
        execution = Execution.fetch(execution_id, job.id, connection=self.connection)
        execution._job = job  # noqa: SLF001  (as RQ's SpawnWorker does)
        self.execution = execution
        self.executions = {execution.id: execution}  # as prepare_execution left it in the worker
        self.main_work_horse(job, queue)


def warm_horse() -> None:
    """Take the pages a job's first model call writes, if this worker preloaded litellm."""
    if "litellm" not in sys.modules:  # not preloaded: importing it here would cost seconds
        return
    from teamctl.shared.agent.litellm_warmup import warm_forked_job
    from teamctl.shared.agent.llm import load_litellm

    warm_forked_job(load_litellm())
