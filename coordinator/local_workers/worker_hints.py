"""Hints about workers that tell the truth: while workers this command started are still starting
(a preload takes 10-30 s), say so instead of "no worker listens", and give the hint to start one
only when none registers in time or they died (naming their log)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from teamctl.shared.process.pids import same_process_alive
from teamctl.shared.process.worker_registry import listening_workers
from teamctl.shared.text import counted

START_GRACE_S = 120.0
"""How long workers this command started may take to register before the plain hint: a cold
preload took up to 28 s on a loaded 2-core machine."""


@dataclass(frozen=True)
class StartedWorker:
    """A worker process this command started: its pid, start time, queues and log."""

    pid: int
    start_ticks: int | None
    queues: tuple[str, ...]
    log: str

    def alive(self) -> bool:
        return same_process_alive(self.pid, self.start_ticks)


@dataclass
class StartingWorkers:
    """The workers this command started (pool or run-scoped), and when."""

    workers: list[StartedWorker] = field(default_factory=list)
    started_at: float = field(default_factory=time.monotonic)

    def on(self, queue: str) -> list[StartedWorker]:
        return [w for w in self.workers if queue in w.queues]


class NoWorkerHint:
    """What to say, once, when a queue's jobs wait and nobody may be listening."""

    def __init__(
        self,
        rq_conn: redis.Redis,
        starting: StartingWorkers,
        note: Callable[[str], None],
        waiter: str,
    ) -> None:
        self.rq_conn = rq_conn
        self.starting = starting
        self.note = note
        self.waiter = waiter
        """Who waits, as the hint names it: "the run", "its turn"."""
        self.said_waiting: set[str] = set()
        self.settled: set[str] = set()
        """Queues with nothing more to say: a worker listened, or the hint was given."""

    def check(self, queue: str) -> bool:
        """Say what holds `queue` up; True once there is nothing more to say (a worker
        listens, or the hint was given), False while workers started here are starting. Each
        is said once, however often a wait on several queues asks."""
        if queue in self.settled:
            return True
        if listening_workers(self.rq_conn, [queue]):
            self.settled.add(queue)
            return True
        started = self.starting.on(queue)
        alive = [w for w in started if w.alive()]
        starting_for_s = time.monotonic() - self.starting.started_at
        if alive and starting_for_s < START_GRACE_S:
            if queue not in self.said_waiting:
                self.said_waiting.add(queue)
                self.note(
                    f"waiting for {counted(len(alive), 'worker')} to start on queue "
                    f"{queue} (a worker preloads for 10-30 s)"
                )
            return False
        self.note(no_worker_hint(queue, self.waiter, started, alive))
        self.settled.add(queue)
        return True


def no_worker_hint(
    queue: str,
    waiter: str,
    started: list[StartedWorker] | None = None,
    alive: list[StartedWorker] | None = None,
) -> str:
    """The hint: what went wrong with workers started here, and how to start one."""
    started, alive = started or [], alive or []
    if started and not alive:
        cause = (
            f"the {counted(len(started), 'worker')} started for queue {queue} exited "
            f"(see {started[0].log}); "
        )
    elif alive:
        cause = (
            f"the {counted(len(alive), 'worker')} started for queue {queue} "
            f"{'has' if len(alive) == 1 else 'have'} not registered "
            f"in {START_GRACE_S:g} s (see {alive[0].log}); "
        )
    else:
        cause = ""
    return (
        f"{cause}no worker listens on queue {queue}; {waiter} waits until one does: "
        f"`teamctl worker {queue}` here or on any host that reaches this Redis "
        f"(or `teamctl workers start --queue {queue}` for background ones)"
    )
