"""teamctl's worker: RQ's forking worker whose job processes are forked before their jobs arrive.

A forked horse pays for every page of the parent it writes to (copy-on-write): ~4,000 pages,
about 15 ms, on a job's first model call through litellm, since calling code writes the reference
counts of the objects it touches; and forking a preloaded parent costs the worker several ms more
before the job starts. WarmForkWorker forks the next job's process (a spare) as soon as it hands a
job over, so the fork is off the next job's path. When its queues are empty, as it is about to
wait (or hands over a job whose process will not be kept), it tells the spare to warm up: one
model call to a loopback server and a Redis connection, taking those page copies while no job
waits. Warming only then keeps a busy worker's CPU for its jobs. The job is handed over by id, as
RQ's SpawnWorker does; the spare runs it exactly as a freshly forked horse would (its own process
group, the same signals). A job waits at most READY_WAIT_S for a spare that is not set up yet,
then forks as RQ does.

A member task's process, once its task is done, is kept for the run's next task on this worker
(a teammate turn's, for the team's next turn): that task then pays neither a fork nor the page
copies, ~20 ms of CPU a task spent on nothing else. A kept process only ever serves jobs of the
run (or team) it first served, one at a time and at most KEPT_MAX_JOBS of them: a run's state
never meets another run's. It exits KEPT_IDLE_S after it was kept if none came, after a job that
failed or left an abandoned Python tool call running, and with the worker. Every other job, and
the first of each run on a worker, starts in a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import select
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.worker.base import SHUTDOWN_SIGNAL
from rq.worker.base import logger as rq_horse_logger
from teamctl.shared.agent.python_tools import abandoned_tool_calls
from teamctl.shared.teams.teammates import TURN_FUNCTION
from teamctl.worker.mcp_warm.process import JOB_ENV
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
NEW_SET_UP_S = 1.0
"""How long a job whose process may be kept waits for a process forked for it to be set up (a
few ms unless the machine is very busy), before it is forked as RQ does."""
HANDOVER_MAX_BYTES = 64 * 1024
"""A job's id, queue name and execution id, and where the MCP keeper and package caches are (two
paths, the second under the state dir), as JSON: far less than this however long the paths."""
WARM = b"warm\n"
"""What the worker writes to an idle spare's pipe to have it warm up; a job is one JSON line."""
SET_UP, WARMED, TOOK, DONE = b"1", b"2", b"3", b"4"
"""What a spare writes to `ready`: once set up, then once warm if it was told to warm up; as it
reads each job handed over; and, kept after a job, once that job is done."""
TOOK_WAIT_S = 5.0
"""How long the worker waits for a live process to say it read the job handed over (it answers
at once; a dead one closes its end, and the job goes to another process, unread)."""
KEPT_JOBS = frozenset({"teamctl.worker.jobs.run_task", TURN_FUNCTION})
"""The jobs whose process may serve the next job of their run (a task's) or team (a turn's): the
run id or team name is their first argument."""
KEPT_IDLE_S = 30
"""How long a kept process waits for its run's next job: a run's next task comes within a round
of its last one ending. Longer, its memory (the ~20 MB of pages it copied) costs more than the
~20 ms its next job would save."""
KEPT_MAX_JOBS = 100
"""Jobs one kept process serves at most, so what a long run leaves in memory stays bounded."""
HORSE_POLL_S = 1.0
"""How often the worker checks that a kept-to-be process still lives while its job runs: a
process the job forked may hold the pipe open after the job's own process died."""


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
    scope: tuple[str, str] | None = None
    """Kept after a job: the function and run (or team) whose jobs alone it takes."""
    kept_at: float = 0.0
    """When it was last kept (time.monotonic())."""

    def takes_job(self, wait_s: float) -> bool:
        """Set up, and warm if told to warm up, within `wait_s` (or gone: the hand-over then
        fails and the job is forked)."""
        return self._hear(WARMED if self.warming else SET_UP, wait_s) is not None

    def took_job(self) -> bool:
        """Whether it read the job just written to it; False if it died first (a process it
        forked may hold the pipe open, so no end of file need come)."""
        heard = self._hear(TOOK, TOOK_WAIT_S)
        return heard if heard is not None else not self.exited()

    def exited(self) -> bool:
        """Whether the process has exited (without reaping it: RQ's wait, or _end, does)."""
        return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None

    def job_done(self) -> bool:
        """Wait until the job handed over ends: True once the process says it is done and waits
        for another, False once it exited (or closed its end)."""
        while (done := self._hear(DONE, HORSE_POLL_S)) is None:
            if self.exited():
                return False  # RQ's wait reaps it
        return done

    def _hear(self, word: bytes, wait_s: float) -> bool | None:
        """Read `ready` until the process has said `word` (True), closed it (False), or
        `wait_s` passed (None)."""
        deadline = time.monotonic() + wait_s
        while word not in self.said:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.ready], [], [], left)[0]:
                return None
            with alarm_held():  # what was read is kept, whenever RQ's monitor alarm comes
                said = os.read(self.ready, 16)
                self.said += said
            if not said:
                return False
        return True

    def close(self) -> None:
        """Close the worker's ends (once: a number closed twice may be another file's by then)."""
        for end in (self.pipe, self.ready):
            if end >= 0:
                with contextlib.suppress(OSError):
                    os.close(end)
        self.pipe = self.ready = -1


def job_scope(job: Job) -> tuple[str, str] | None:
    """The function and run (or team) whose next job this job's process may serve, if any."""
    if job.func_name not in KEPT_JOBS or not job.args or not isinstance(job.args[0], str):
        return None
    return job.func_name, job.args[0]


class WarmForkWorker(TeamctlWorker):
    """teamctl's forking worker whose horses are forked before their jobs arrive, warmed while no
    job waits, and kept for their run's next job."""

    _spare: Spare | None = None
    _horse: Spare | None = None
    """The spare or kept process running the job in hand."""
    _kept: Spare | None = None
    """A process done with its job, waiting for the next of its run (or team)."""
    _burst = False

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        self._fork_spare()

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """RQ's wait for the next job; the spare warms up first if the queues are empty (not in
        burst mode, whose worker stops at the first empty dequeue, nor at its hand-overs). A
        kept process waits KEPT_IDLE_S of it at most."""
        self._burst = timeout is None  # how RQ's loop asks in burst mode
        if timeout is None:
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        self._warm_spare_if_queues_empty()
        self._end_kept_if_idle()
        if self._kept is not None:
            since = time.monotonic()
            left_s = max(1, round(KEPT_IDLE_S - (since - self._kept.kept_at)))
            kept_s = min(left_s, max_idle_time or left_s)
            result = super().dequeue_job_and_maintain_ttl(min(timeout, kept_s), kept_s)
            if result is not None:
                return result
            self._end_kept()
            if max_idle_time is not None:
                max_idle_time -= round(time.monotonic() - since)
                if max_idle_time <= 0:
                    return None
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
            if self._stop_requested:
                self._end_kept()
            elif self._spare is None:
                self._fork_spare()

    def wait_for_horse(self) -> tuple[int | None, int | None, Any]:
        """RQ's wait for the job's process to exit; a process kept for the next job instead
        says it is done, and is kept (as if it had exited with 0)."""
        # RQ's monitor alarm may interrupt this anywhere (RQ then asks again): what the
        # process said is kept in `said`, and the move to kept happens with the alarm held.
        horse = self._horse
        if horse is None or horse.pid != self.horse_pid:
            if self._kept is not None and self._kept.pid == self.horse_pid:
                return self.horse_pid, os.EX_OK, None  # kept already, as RQ asks again
            return super().wait_for_horse()
        if horse.job_done():
            with alarm_held():
                self._horse = None
                self._keep(horse)
            return horse.pid, os.EX_OK, None
        self._horse = None
        horse.close()
        return super().wait_for_horse()

    def _in_mcp_keeper(self) -> None:
        """The keeper holds no end of a spare's (or kept process's) pipes: they must see end
        of file when the worker closes its own. The spare, forked before the keeper, is told
        where it is with its job."""
        self._close_others()

    def fork_work_horse(self, job: Job, queue: Queue) -> None:
        """Hand the job to the process kept for its run, else to the spare, then fork the next
        spare while this job runs, and warm it up if no job waits and this job's process will
        not be kept (else once the worker is idle). A job waits at most
        READY_WAIT_S for a spare that is not set up yet (or still warming up), and is then
        forked as RQ does (the spare kept for the next one)."""
        scope = job_scope(job)
        self._end_kept_if_idle()  # jobs it does not take may keep the worker busy
        kept = self._kept
        if kept is not None and kept.scope == scope:
            self._kept = None
            if not self._hand_over(kept, job, queue):
                self._end(kept)
                self._hand_to_spare(job, queue, scope)
        else:  # a kept process of another run stays, until this job's process is kept
            self._hand_to_spare(job, queue, scope)
        if self._stop_requested:
            return
        if self._spare is None:
            self._fork_spare()
        if not self._burst and self._horse is None:
            # Nothing else waiting: the next job may come the moment this one ends (a
            # teammate's wake, a task this one unblocks), with no idle wait to warm up in.
            # A process kept after this job takes its run's (or team's) next one itself: the
            # spare then warms up once the worker is idle, not beside the job's start.
            self._warm_spare_if_queues_empty(at_hand_over=True)

    def _hand_to_spare(self, job: Job, queue: Queue, scope: tuple[str, str] | None) -> None:
        """The job to the spare; when the spare is not ready or gone, to a process forked for
        it if its process may be kept (RQ's fork could not be), else as RQ forks one."""
        spare = self._spare
        process: Spare | None = None
        if spare is not None and spare.takes_job(READY_WAIT_S):
            self._spare, process = None, spare
        elif scope is not None and not self._preload_pending():
            process = self._new_process()  # the spare stays, warm for the next job
        if process is not None:
            # One forked before the rest of the preload (and the lower niceness) runs this job
            # only: kept, it would serve the run's next ones without them.
            process.scope = None if self._preload_pending() else scope
            if self._hand_over(process, job, queue):
                self._finish_preload()  # before the next spare, which then inherits it
                return
            self._end(process)
        super().fork_work_horse(job, queue)

    def _new_process(self) -> Spare | None:
        """A process forked for the job in hand, once set up (still warming up, the spare may
        not take it at once, as just after the worker started); None if there is none within
        NEW_SET_UP_S."""
        process = self._fork_process()
        if process is not None and not process.takes_job(NEW_SET_UP_S):
            self._end(process)
            return None
        return process

    def _finish_preload(self) -> bool:
        """The rest of the preload (TeamctlWorker's), and then a spare forked before it gone:
        it would run its job without what the preload now holds."""
        ran = super()._finish_preload()
        if ran:
            self._end_spare()
            self._end_kept()
        return ran

    def teardown(self) -> None:
        if not self.is_horse:
            self._end_spare()
            self._end_kept()
        super().teardown()

    def main_work_horse(self, job: Job, queue: Queue) -> None:
        """RQ's horse, forked for a job no spare took: without the pipes of the worker's other
        processes, which would keep them from seeing the worker close them."""
        self._close_others()
        super().main_work_horse(job, queue)

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

    def _hand_over(self, process: Spare, job: Job, queue: Queue) -> bool:
        """Write the job to a spare or kept process; it then runs the job in hand. False if the
        process is gone (the caller ends it and forks instead)."""
        stay = process.scope is not None
        # Where the MCP keeper is now: it may have been forked after this process.
        env = {name: os.environ.get(name) for name in JOB_ENV}
        payload = json.dumps([job.id, queue.name, self.execution.id, stay, env]).encode() + b"\n"  # type: ignore[union-attr]
        if len(payload) >= HANDOVER_MAX_BYTES:  # a line the process would cut
            return False
        process.said = b""
        try:
            os.write(process.pipe, payload)
            if not process.took_job():
                raise BrokenPipeError("it exited without reading the job")
        except OSError as exc:  # it died (killed while waiting): fork a horse instead
            self.log.warning(
                "Worker %s: spare %s is gone (%s); forking", self.name, process.pid, exc
            )
            return False
        if not stay:
            process.close()  # it exits after this job: nothing more to say or hear
        os.environ["RQ_WORKER_ID"] = self.name  # as RQ's fork_work_horse leaves them
        os.environ["RQ_JOB_ID"] = job.id
        self._horse_pid = process.pid
        self._horse = process if stay else None
        # RQ leaves procline unannotated.
        self.procline(f"Handed over to {process.pid} at {time.time()}")  # type: ignore[no-untyped-call]
        return True

    def _keep(self, process: Spare) -> None:
        """Keep a process that finished its job for the next of its run (or team)."""
        self._end_kept()
        process.said = b""
        process.kept_at = time.monotonic()
        self._kept = process

    def _fork_spare(self) -> None:
        """Fork the next job's process; without one (no process or memory left), jobs are
        forked as RQ forks them."""
        self._end_spare()
        self._spare = self._fork_process()

    def _fork_process(self) -> Spare | None:
        """Fork a process that waits for its job (None: no process or memory left)."""
        job_read, job_write = os.pipe()
        ready_read, ready_write = os.pipe()
        parent = os.getpid()
        try:
            pid = os.fork()
        except OSError as exc:
            for end in (job_read, job_write, ready_read, ready_write):
                os.close(end)
            self.log.warning("Worker %s: no spare process (%s); forking each job", self.name, exc)
            return None
        if pid == 0:
            os.close(job_write)
            os.close(ready_read)
            self._close_others()
            self._run_spare(parent, job_read, ready_write)  # never returns
        os.close(job_read)
        os.close(ready_write)
        return Spare(pid, job_write, ready_read)

    def _close_others(self) -> None:
        """In a new child: close the worker's ends of its other processes' pipes, so each of
        them sees end of file when the worker closes them."""
        for process in (self._spare, self._horse, self._kept):
            if process is not None:
                process.close()
        self._spare = self._horse = self._kept = None

    def _end_kept_if_idle(self) -> None:
        """End the kept process once it has waited KEPT_IDLE_S for its run's next job."""
        if self._kept is not None and time.monotonic() - self._kept.kept_at >= KEPT_IDLE_S:
            self._end_kept()

    def _end_spare(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            self._end(spare)

    def _end_kept(self) -> None:
        kept, self._kept = self._kept, None
        if kept is not None:
            self._end(kept)

    def _end(self, process: Spare) -> None:
        """Close a waiting process's pipes (it exits on end of file) and reap it."""
        process.close()
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGKILL)  # it may be warming up: no need to wait for it
        with contextlib.suppress(ChildProcessError):
            os.waitpid(process.pid, 0)

    def _run_spare(self, parent: int, pipe: int, ready: int) -> None:
        """The spare: a horse in waiting. Say it is set up, warm up when told, then run the job
        handed over; kept, say when it is done and run the next. Exit when the worker closes
        the pipe (or dies: another fork of the worker may hold the pipe open)."""
        status = 1
        try:
            die_with_parent(parent)
            os.setpgrp()  # as RQ's horse: the worker's Ctrl+C is the worker's to handle
            self.setup_work_horse_signals()  # type: ignore[no-untyped-call]  # RQ: unannotated
            _say(ready, SET_UP)
            with os.fdopen(pipe, "rb") as lines:
                self._serve(lines, ready)
            status = 0
        except BaseException:  # noqa: BLE001  (a horse must exit, never return to the loop)
            with contextlib.suppress(Exception):
                self.log.exception("Worker %s: spare %s failed", self.name, os.getpid())
        finally:
            os._exit(status)

    def _serve(self, lines: Any, ready: int) -> None:
        """Run the jobs handed over (one unless kept), warming up first if told to."""
        idle_since = time.monotonic()
        line = lines.readline(HANDOVER_MAX_BYTES)
        if line == WARM:
            self._warm_up()
            idle_since = time.monotonic()
            _say(ready, WARMED)
            line = lines.readline(HANDOVER_MAX_BYTES)
        served = 0
        while line:  # none: the worker is stopping, or died
            if time.monotonic() - idle_since > STALE_CONNECTION_S:
                # Only a spare waits this long (a kept process, KEPT_IDLE_S at most), and its
                # jobs' own client is made with its first job.
                self.connection.connection_pool.disconnect()
            _say(ready, TOOK)
            job_id, queue_name, execution_id, stay, env = json.loads(line)
            _set_environment(env)
            succeeded = self._run_handed_over(job_id, queue_name, execution_id)
            served += 1
            if not (succeeded and stay) or served >= KEPT_MAX_JOBS:
                return
            if abandoned_tool_calls():  # their threads end with this process
                return
            idle_since = time.monotonic()
            _say(ready, DONE)
            line = lines.readline(HANDOVER_MAX_BYTES)

    def _warm_up(self) -> None:
        """Take the page copies and the Redis connection a job would otherwise pay for."""
        try:
            warm_horse()
            self.connection.ping()  # redis-py opens a new connection in a new process
        except Exception:  # a cold spare still runs its job as a forked horse would
            self.log.warning(
                "Worker %s: spare %s did not warm up", self.name, os.getpid(), exc_info=True
            )

    def _run_handed_over(self, job_id: str, queue_name: str, execution_id: str) -> bool:
        """What RQ's fork_work_horse and main_work_horse do in the child, for a job read back
        by id, without the exit; whether the job succeeded."""
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
        random.seed()
        self._is_horse = True
        self.log = rq_horse_logger
        return self.perform_job(job, queue, execution)


@contextlib.contextmanager
def alarm_held() -> Iterator[None]:
    """SIGALRM (RQ's monitor timer, which raises) held off until the block is done."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})


def _set_environment(env: dict[str, str | None]) -> None:
    """Set (or, for None, unset) the variables the worker names to its jobs."""
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _say(ready: int, word: bytes) -> None:
    with contextlib.suppress(OSError):  # the worker may be gone already
        os.write(ready, word)


def warm_horse() -> None:
    """Take the pages a job's first model call writes, if this worker preloaded litellm."""
    if "litellm" not in sys.modules:  # not preloaded: importing it here would cost seconds
        return
    from teamctl.shared.agent.litellm_warmup import warm_forked_job
    from teamctl.shared.agent.llm import load_litellm

    warm_forked_job(load_litellm())
