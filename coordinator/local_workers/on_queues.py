"""The warm pool on a set of queues: topped up with this process's environment, for a run, a
team's turns or `teamctl workers start`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from teamctl.coordinator.local_workers.job_env import differences, job_variables
from teamctl.coordinator.local_workers.pool import PoolWorker, WorkerPool
from teamctl.coordinator.local_workers.worker_hints import StartedWorker
from teamctl.shared.redis.connection import connect
from teamctl.shared.worker_registry import listening_workers

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

Note = Callable[[str], None]
"""How a line for a person is shown (stderr for the CLI, logging for the API)."""


@dataclass(frozen=True)
class PoolOnQueues:
    """The local pool's workers on a run's queues: those kept, and those started now."""

    kept: list[PoolWorker]
    started: list[PoolWorker]

    def as_started(self) -> list[StartedWorker]:
        """Every one of them, for hints that wait while they register."""
        return [StartedWorker(w.pid, w.start_ticks, tuple(w.queues), w.log)
                for w in [*self.kept, *self.started]]


def ensure_pool(redis_url: str, queues: list[str], size: int, idle_exit_s: int,
                settings: Settings, note: Note, team_variables: Iterable[str] = (), *,
                explicit: bool = False) -> PoolOnQueues:
    """Top the local pool up to `size` live workers on `queues` with this process's
    environment: workers started with another one (a provider key, PYTHONPATH, the working
    directory, the teamctl install, a variable in `team_variables`) are replaced, and said
    so; none start when the pool has none and other workers already listen there, unless the
    person asked for them (`explicit`: `teamctl workers start`, which reports them itself)."""
    pool = local_pool(settings)
    digests = pool.env_digests(os.environ, os.getcwd())
    with pool.locked():
        serving = pool.live(redis_url, queues)
        stale = {w.pid: changed for w in serving
                 if (changed := differences(digests, w.env, job_variables(
                     os.environ, w.env, team_variables)))}
        if stale:
            pool.retire([w for w in serving if w.pid in stale])
            note(_replacing(len(stale), queues, [w.env for w in serving if w.pid in stale],
                            next(iter(stale.values()))))
        live = [w for w in serving if w.pid not in stale]
        if len(live) >= size:
            return PoolOnQueues(live, [])
        if not serving and not explicit \
                and listening_workers(connect(redis_url, decode=False), queues):
            return PoolOnQueues([], [])  # the user's own workers serve these queues
        started = pool.start(redis_url, queues, size - len(live), idle_exit_s, os.environ,
                             digests)
    if not explicit:
        note(f"started {len(started)} local pool worker(s) on {', '.join(queues)}; they serve "
             f"later runs and exit after {idle_exit_s} s idle (`teamctl workers stop` stops "
             "them)")
    return PoolOnQueues(live, started)


def _replacing(count: int, queues: list[str], recorded: list[dict[str, str]],
               changed: list[str]) -> str:
    """The one line that says pool workers are replaced, and what differs (names only)."""
    if not all(recorded):
        why = "by an older teamctl"
    else:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more"
                                          if len(changed) > 4 else "")
        why = f"with another {shown}"
    return (f"replacing {count} local pool worker(s) on {', '.join(queues)} started {why} "
            "(each finishes the job in hand) with workers of this environment")


def local_pool(settings: Settings) -> WorkerPool:
    """The warm pool recorded in the state dir's `pool`."""
    return WorkerPool(settings.state_dir / "pool", settings.state_dir / "logs")
