"""Who listens on which queue, from RQ's registry (any host), seen from this host."""

from __future__ import annotations

import socket
from typing import Any

import redis
from teamctl.shared.process.pids import pid_alive


def listening_workers(conn: redis.Redis, queues: list[str]) -> bool:
    """Whether every one of `queues` has a live worker in RQ's registry (any host)."""
    from rq import Queue, Worker

    return all(
        any(not dead_here(w) for w in Worker.all(queue=Queue(name, connection=conn)))
        for name in queues
    )


def registered_here(conn: redis.Redis, queues: list[str]) -> dict[int, Any]:
    """The workers of this host in RQ's registry that listen on any of `queues`, by pid."""
    from rq import Queue, Worker

    host = socket.gethostname()
    return {
        w.pid: w
        for name in queues
        for w in Worker.all(queue=Queue(name, connection=conn))
        if w.hostname == host and w.pid is not None
    }


def dead_here(worker: object) -> bool:
    """A registered worker of this host whose process is gone: a SIGKILLed worker stays in RQ's
    registry until its key expires (minutes), and must not count as listening."""
    pid = getattr(worker, "pid", None)
    return (
        getattr(worker, "hostname", None) == socket.gethostname()
        and pid is not None
        and not pid_alive(pid)
    )
