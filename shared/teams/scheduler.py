"""When a persistent team's turns run: each turn is an RQ job, enqueued by function name
(TURN_FUNCTION, so no worker code is imported here), and reconcile reruns a turn whose worker died.

Reconcile runs where a stalled turn would otherwise hold something up unnoticed: before a `team`
verb hands teammates work (spawn, send, broadcast, shutdown, review, task add) or lists them,
every heartbeat_ttl_s/3 while `teamctl lead` watches the team, and after a turn, at most once per
heartbeat_ttl_s per team whatever the number of workers (a turn counts as stalled only a TTL after
its last refresh, so looking more often finds little more). Reads of the team (inbox, messages,
requests, task list, export) and create and delete need none.
"""

from __future__ import annotations

from functools import cached_property
from typing import Protocol

import redis
from teamctl.shared.bus import LEAD
from teamctl.shared.ids import check_queue
from teamctl.shared.process.worker_registry import listening_workers
from teamctl.shared.redis.connection import same_server
from teamctl.shared.teams.lead_inbox import LeadInbox
from teamctl.shared.teams.tasks import Store, TeamTasks, until_current
from teamctl.shared.teams.teammates import TURN_FUNCTION, Teammate, TeammateStatus

TURN_RESULT_TTL_S = 60
"""How long a finished turn's RQ job and result stay (for `rq info`): the teammate's record is
what tells its state, and a team taking thousands of turns an hour must not keep each one."""


class SchedulingStore(Store, Protocol):
    """What the scheduler needs of a team's store: the board's needs and the lead inbox, which
    a reconcile giving up on a teammate writes to."""

    @property
    def lead_inbox(self) -> LeadInbox: ...

    def exists(self) -> bool: ...


class TurnScheduler:
    """One team's turn jobs: enqueued with ids only, found again by reconcile."""

    def __init__(self, store: SchedulingStore) -> None:
        self.store = store
        self.conn = store.conn
        self.keys = store.keys

    @cached_property
    def rq_conn(self) -> redis.Redis:
        """RQ needs a client that does not decode responses."""
        return same_server(self.conn, decode=False)

    def enqueue_turn(self, teammate: Teammate) -> None:
        """One turn job on the teammate's queue, carrying only ids; its id goes on the
        teammate's hash, so reconcile can tell a turn still waiting for a worker from a lost one."""
        self.enqueue(teammate.name, teammate.queue)

    def enqueue(self, name: str, queue: str) -> None:
        """enqueue_turn for a caller that already knows the queue (a script named it)."""
        from rq import Queue  # here: RQ is slow to import, and most team verbs wake nobody

        job = Queue(queue, connection=self.rq_conn).enqueue(
            TURN_FUNCTION,
            self.store.team,
            name,
            job_timeout=self.store.options.job_timeout_s,
            description=f"turn of {name} in team {self.store.team}",
            result_ttl=TURN_RESULT_TTL_S,
            failure_ttl=24 * 3600,
        )
        self.conn.hset(self.keys.teammate(name), "job_id", job.id)

    def workers_on(self, queue: str) -> bool:
        """Whether a live worker listens on `queue` (RQ's registry): without one, turns wait."""
        return listening_workers(self.rq_conn, [check_queue(queue)])

    def reconcile_at_most_every_ttl(self) -> list[str]:
        """reconcile(), unless some process of any host reconciled the team through this less
        than heartbeat_ttl_s ago: what a worker runs after each turn."""
        ttl_ms = int(self.store.options.heartbeat_ttl_s * 1000)
        if not self.conn.set(self.keys.reconciled, "1", nx=True, px=ttl_ms):
            return []
        return self.reconcile()

    def reconcile(self) -> list[str]:
        """Rerun every stalled teammate's turn (working, no lease, unseen for a lease TTL), up to
        max_turn_attempts; past it the teammate goes idle, its tasks go back to the board and
        the lead is told. Returns the teammates whose turn was enqueued again."""
        store = self.store
        names = store.names()
        if not names or not store.exists():
            return []
        # Only working teammates can be stalled: an idle team of a thousand costs the script
        # nothing. One that starts working after this read is fresh, not stalled.
        working = self._working(names)
        queued = self._queued_turns(working)
        names = [name for name in working if name not in queued]
        if not names:
            return []
        pairs = [key for name in names for key in (self.keys.teammate(name), self.keys.turn(name))]
        options = store.options
        tasks = TeamTasks(store)
        _, rerun, released = until_current(
            lambda: store.scripts["team_reconcile"](
                keys=[
                    self.keys.bus,
                    self.keys.bus_seq,
                    self.keys.inbox(LEAD),
                    *pairs,
                    *tasks.board_keys(),
                    *tasks.running_keys(),
                ],
                args=[int(options.heartbeat_ttl_s * 1000), options.max_turn_attempts, *names],
            )
        )
        store.lead_inbox.keep_bounds()
        if int(released):
            tasks.wake()
        for name in rerun:
            self.enqueue_turn(store.get(name))
        return list(rerun)

    def _working(self, names: list[str]) -> dict[str, str]:
        """The working teammates among `names`, with their turn job's id ('' for none)."""
        pipe = self.conn.pipeline(transaction=False)
        for name in names:
            pipe.hmget(self.keys.teammate(name), "status", "job_id")
        return {
            name: job_id or ""
            for name, (status, job_id) in zip(names, pipe.execute(), strict=True)
            if status == TeammateStatus.WORKING
        }

    def _queued_turns(self, working: dict[str, str]) -> set[str]:
        """The working teammates whose turn job still waits in its queue (not started, so no
        lease yet, however long it waits for a free worker)."""
        jobs = {name: job_id for name, job_id in working.items() if job_id}
        if not jobs:
            return set()
        from rq.job import Job, JobStatus

        fetched = Job.fetch_many(list(jobs.values()), connection=self.rq_conn)
        waiting = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED}
        return {
            name
            for name, job in zip(jobs, fetched, strict=True)
            if job is not None and job.get_status(refresh=False) in waiting
        }
