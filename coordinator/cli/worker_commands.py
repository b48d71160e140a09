"""`teamctl workers`: list the workers in RQ's registry, start and stop the local pool."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

import click
from teamctl.coordinator.advice import note
from teamctl.coordinator.cli.table import print_listing
from teamctl.coordinator.local_workers.on_queues import local_pool
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.connection import connect
from teamctl.shared.settings import Settings
from teamctl.shared.teams.teammates import DEFAULT_QUEUE
from teamctl.shared.text import counted, one_line

if TYPE_CHECKING:
    from teamctl.coordinator.local_workers.pool import PoolWorker

QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
HEADER = ("queue", "worker", "state", "job", "pool")


def list_workers_command(redis_url: str, as_json: bool, settings: Settings) -> None:
    """Every registered worker (host, pid, state, current job, queues, and the local pool's
    environment it belongs to, if any); the table has one row per queue a worker serves."""
    from rq import Worker
    from teamctl.shared.process.worker_registry import dead_here

    pool = {w.pid: w for w in local_pool(settings).live()}
    registered = Worker.all(connection=connect(redis_url, decode=False))
    rows = [_worker_row(w, pool) for w in registered if not dead_here(w)]
    rows.sort(key=lambda row: (row["queues"], row["name"]))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    cells = sorted((queue, *_worker_cells(row, pool)) for row in rows for queue in row["queues"])
    print_listing(HEADER, cells, empty="no workers")


def _worker_row(worker: Any, pool: dict[int, PoolWorker]) -> dict[str, Any]:
    """A registered worker as `workers --json` prints it; `pool_env` names the environment a
    pool worker of this host was started with (None: not in the pool)."""
    import socket

    ours = pool.get(worker.pid) if worker.hostname == socket.gethostname() else None
    return {
        "name": worker.name,
        "host": worker.hostname,
        "pid": worker.pid,
        "state": _text(worker.get_state()),
        "current_job": worker.get_current_job_id(),
        "queues": worker.queue_names(),
        "pool": ours is not None,
        "pool_env": ours.env_key if ours else None,
    }


def _worker_cells(row: dict[str, Any], pool: dict[int, PoolWorker]) -> tuple[str, ...]:
    """Worker, state, job and pool as the table shows them: the pool column names the
    environment (workers started together share it; `retiring`: being replaced), or `-`."""
    retiring = row["pool"] and pool[row["pid"]].retiring
    return (
        one_line(f"{row['host']}:{row['pid']}"),
        one_line(row["state"]),
        one_line(row["current_job"] or "-"),
        (row["pool_env"] or "-") + (" retiring" if retiring else ""),
    )


def _text(value: Any) -> str:
    """RQ's state as plain text: an enum member, bytes or str depending on where it was read."""
    value = getattr(value, "value", value)
    return value.decode() if isinstance(value, bytes) else str(value)


def check_queue_names(queues: list[str], given_as: str) -> None:
    """ConfigError (exit 2) for a queue name RQ or a shell would trip on."""
    bad = [q for q in queues if not QUEUE_NAME.match(q)]
    if bad:
        raise ConfigError(
            f"{given_as} {bad[0]!r} is not a queue name: use letters, digits and _.:-"
        )


def foreground_worker_command(
    redis_url: str, queues: list[str], burst: bool, idle_exit_s: int | None
) -> NoReturn:
    """`teamctl worker`: become the documented worker, `rq worker QUEUE...` with teamctl's
    settings, classes and Redis (exec: signals, logs and exit code are RQ's own)."""
    from teamctl.coordinator.local_workers.processes import worker_env

    queues = queues or [DEFAULT_QUEUE]
    check_queue_names(queues, "QUEUE")
    connect(redis_url).close()  # Redis down is one line and exit 1, not RQ's traceback
    argv = [
        sys.executable,
        "-m",
        "rq.cli",
        "worker",
        *(["--burst"] if burst else []),
        *(["--max-idle-time", str(idle_exit_s)] if idle_exit_s else []),
        *queues,
    ]
    sys.stdout.flush()
    os.execve(sys.executable, argv, worker_env(os.environ, redis_url))


def start_pool_command(
    redis_url: Callable[[], str],
    queues: list[str],
    count: int,
    idle_exit_s: int,
    settings: Settings,
) -> None:
    """`teamctl workers start`: top the pool up to `count` live workers on `queues`, replacing
    those started with another environment (as `teamctl run` does)."""
    from teamctl.coordinator.local_workers.on_queues import ensure_pool

    queues = queues or [DEFAULT_QUEUE]
    check_queue_names(queues, "--queue")
    url = redis_url()
    connect(url).close()  # Redis down is exit 1 before any worker starts against it

    pool = ensure_pool(url, queues, count, idle_exit_s, settings, note, explicit=True)
    pids = " ".join(str(w.pid) for w in [*pool.kept, *pool.started])
    click.echo(
        f"pool on {', '.join(queues)}: {len(pool.kept)} running, {len(pool.started)} "
        f"started (pids {pids})"
    )


def stop_pool_command(settings: Settings, redis_url: str | None = None) -> None:
    """`teamctl workers stop`: stop every recorded pool worker by pid (only those serving
    `redis_url`, if given: `teamctl redis stop` stops the ones of its server)."""
    pool = local_pool(settings)
    with pool.locked():
        stopped = pool.stop(redis_url=redis_url)
    if stopped or redis_url is None:
        click.echo(
            f"stopped {counted(len(stopped), 'pool worker')}"
            if stopped
            else "no pool workers running"
        )
