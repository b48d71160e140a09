"""The warm pool on a set of queues: topped up with this process's environment, for a run, a
team's turns or `teamctl workers start`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from teamctl.coordinator.local_workers.job_env import differences, job_variables
from teamctl.coordinator.local_workers.pool import PoolWorker, WorkerPool, redis_identity
from teamctl.coordinator.local_workers.processes import STOP_TIMEOUT_S
from teamctl.coordinator.local_workers.worker_hints import START_GRACE_S, StartedWorker
from teamctl.shared.errors import InfraError
from teamctl.shared.process.worker_registry import listening_workers, registered_here
from teamctl.shared.redis.connection import connect
from teamctl.shared.text import counted

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

Note = Callable[[str], None]
"""How a line for a person is shown (stderr for the CLI, logging for the API)."""
HAND_OVER_POLL_S = 0.1


@dataclass(frozen=True)
class PoolOnQueues:
    """The local pool's workers on a run's queues: those kept, and those started now."""

    kept: list[PoolWorker]
    started: list[PoolWorker]

    def as_started(self) -> list[StartedWorker]:
        """Every one of them, for hints that wait while they register."""
        return [
            StartedWorker(w.pid, w.start_ticks, tuple(w.queues), w.log)
            for w in [*self.kept, *self.started]
        ]


def ensure_pool(
    redis_url: str,
    queues: list[str],
    size: int,
    idle_exit_s: int,
    settings: Settings,
    note: Note,
    team_variables: Iterable[str] = (),
    *,
    explicit: bool = False,
) -> PoolOnQueues:
    """Top the local pool up to `size` live workers on `queues` with this process's
    environment: workers started with another one (a provider key, PYTHONPATH, the working
    directory, the teamctl install, a variable in `team_variables`) are replaced, and said
    so; none start when the pool has none and other workers already listen there, unless the
    person asked for them (`explicit`: `teamctl workers start`, which reports them itself).
    Returns once the replaced workers take no more jobs and their replacements registered, so
    what the caller enqueues next runs in this environment."""
    pool = local_pool(settings)
    digests = pool.env_digests(os.environ, os.getcwd())
    with pool.locked():
        on_queues, retired = _retire_stale(pool, redis_url, queues, digests, team_variables, note)
        live = [w for w in on_queues if set(queues) <= set(w.queues)]
        if len(live) >= size:
            started: list[PoolWorker] = []
        elif (
            not live
            and not retired
            and not explicit
            and listening_workers(connect(redis_url, decode=False), queues)
        ):
            return PoolOnQueues([], [])  # the user's own workers serve these queues
        else:
            started = pool.start(
                redis_url, queues, size - len(live), idle_exit_s, os.environ, digests
            )
    if started and not explicit:
        note(
            f"started {counted(len(started), 'local pool worker')} on {', '.join(queues)}; "
            f"they serve later runs and exit after {idle_exit_s} s idle (`teamctl workers "
            "stop` stops them)"
        )
    # Replacing: the new workers are awaited too (a fresh pool's can only be of this one).
    hand_over(redis_url, queues, retired, started if retired else [])
    return PoolOnQueues(live, started)


def retire_stale_pool(
    redis_url: str,
    queues: list[str],
    settings: Settings,
    note: Note,
    team_variables: Iterable[str] = (),
) -> None:
    """Retire the pool workers on `queues` started with another environment, starting none
    (for a command with workers of its own, or none by request): returns once they take no
    more jobs."""
    pool = local_pool(settings)
    if not pool.record.exists():
        return  # no pool: nothing to read, and no state dir to create for it
    digests = pool.env_digests(os.environ, os.getcwd())
    with pool.locked():
        _, retired = _retire_stale(
            pool, redis_url, queues, digests, team_variables, note, replaced=False
        )
    hand_over(redis_url, queues, retired, [])


def _retire_stale(
    pool: WorkerPool,
    redis_url: str,
    queues: list[str],
    digests: dict[str, str],
    team_variables: Iterable[str],
    note: Note,
    *,
    replaced: bool = True,
) -> tuple[list[PoolWorker], list[PoolWorker]]:
    """Under the pool's lock: retire (and say so) the live pool workers of this Redis that
    listen on any of `queues` with another environment than `digests`; returns those kept
    and those retired. One on only some of the queues counts too: a job on the queue it
    shares would run in its environment."""
    redis_id = redis_identity(redis_url)
    on_queues = [
        w
        for w in pool.live()
        if w.redis_id == redis_id and not w.retiring and set(queues) & set(w.queues)
    ]
    stale = {
        w.pid: changed
        for w in on_queues
        if (
            changed := differences(digests, w.env, job_variables(os.environ, w.env, team_variables))
        )
    }
    retired = [w for w in on_queues if w.pid in stale]
    if retired:
        pool.retire(retired)
        note(
            _replacing(
                len(retired),
                sorted({q for w in retired for q in w.queues}),
                [w.env for w in retired],
                next(iter(stale.values())),
                replaced,
            )
        )
    return [w for w in on_queues if w.pid not in stale], retired


def hand_over(
    redis_url: str,
    queues: list[str],
    retired: list[PoolWorker],
    started: list[PoolWorker],
    *,
    retire_wait_s: float = STOP_TIMEOUT_S,
    start_wait_s: float = START_GRACE_S,
) -> None:
    """Wait until each `retired` worker takes no more jobs (gone, or its warm shutdown in
    RQ's registry: it finishes the job in hand only), then until each `started` one
    registered on `queues` or died; InfraError if a retired one still listens after
    `retire_wait_s`, since a job enqueued now could run in its environment."""
    if not retired and not started:
        return
    conn = connect(redis_url, decode=False)
    deadline = time.monotonic() + retire_wait_s
    while True:
        registered = registered_here(conn, queues)
        still = [w for w in retired if _still_listening(w, registered)]
        if not still:
            break
        if time.monotonic() >= deadline:
            pids = " ".join(str(w.pid) for w in still)
            raise InfraError(
                f"{counted(len(still), 'pool worker')} started with another "
                f"environment (pids {pids}) still listening {retire_wait_s:g} s "
                "after being asked to stop; `teamctl workers stop` stops the pool "
                "by pid, then try again"
            )
        time.sleep(HAND_OVER_POLL_S)  # other processes: nothing to block on
    deadline = time.monotonic() + start_wait_s
    while time.monotonic() < deadline:  # past it, the hints say what holds the queue up
        registered = registered_here(conn, queues)
        if not [w for w in started if w.alive() and w.pid not in registered]:
            return
        time.sleep(HAND_OVER_POLL_S)  # preloading


def _still_listening(worker: PoolWorker, registered: dict[int, Any]) -> bool:
    """Whether a retired worker may still take a job: alive, and not registered with its
    warm shutdown recorded (an idle one exits at once; a busy one first finishes its job)."""
    if not worker.alive():
        return False
    seen = registered.get(worker.pid)
    return seen is None or seen.shutdown_requested_date is None


def _replacing(
    count: int,
    queues: list[str],
    recorded: list[dict[str, str]],
    changed: list[str],
    replaced: bool,
) -> str:
    """The one line that says pool workers are replaced (or only retired), and what differs
    (names only)."""
    if not all(recorded):
        why = "by an older teamctl"
    else:
        shown = ", ".join(changed[:4]) + (
            f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        )
        why = f"with another {shown}"
    if not replaced:
        return (
            f"retiring {counted(count, 'local pool worker')} on {', '.join(queues)} "
            f"started {why} (each finishes the job in hand)"
        )
    return (
        f"replacing {counted(count, 'local pool worker')} on {', '.join(queues)} "
        f"started {why} (each finishes the job in hand) with workers of this environment"
    )


def local_pool(settings: Settings) -> WorkerPool:
    """The warm pool recorded in the state dir's `pool`."""
    return WorkerPool(settings.state_dir / "pool", settings.state_dir / "logs")
