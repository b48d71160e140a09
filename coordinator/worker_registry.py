"""Who listens on which queue, from RQ's registry (any host), seen from this host."""

from __future__ import annotations

import socket
from pathlib import Path

import redis
from teamctl.shared.embedded_redis import pid_alive


def listening_workers(conn: redis.Redis, queues: list[str]) -> bool:
    """Whether every one of `queues` has a live worker in RQ's registry (any host)."""
    from rq import Queue, Worker

    return all(any(not dead_here(w) for w in Worker.all(queue=Queue(name, connection=conn)))
               for name in queues)


def dead_here(worker: object) -> bool:
    """A registered worker of this host whose process is gone: a SIGKILLed worker stays in RQ's
    registry until its key expires (minutes), and must not count as listening."""
    pid = getattr(worker, "pid", None)
    return (getattr(worker, "hostname", None) == socket.gethostname() and pid is not None
            and not pid_alive(pid))


def proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time in clock ticks from /proc; None off Linux or
    when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and ")"
    return fields[0], int(fields[19])


def same_process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether the process started as `pid` at `start_ticks` still runs (not a zombie, not a
    reused pid)."""
    stat = proc_stat(pid)
    if stat is None:
        return pid_alive(pid) and start_ticks is None
    state, ticks = stat
    return state != "Z" and (start_ticks is None or ticks == start_ticks)
