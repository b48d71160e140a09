"""`python -m teamctl.worker.health [QUEUE...]`: exit 0 when a live worker of this host is
registered in RQ on every QUEUE (default: members), else 1 with one line saying what is missing.

A container's health check (compose.yaml): in a container the host name is the container's, so
"a worker of this host" is this container's worker. A process that is up but never registered
(Redis unreachable, a preload that hangs) or whose registration is gone reads as unhealthy, which
a check of the process alone would miss. Cheap to run: it neither imports litellm nor RQ's jobs.
"""

from __future__ import annotations

import socket
import sys

from teamctl.shared.errors import TeamError
from teamctl.shared.process.worker_registry import dead_here
from teamctl.shared.redis.connection import connect
from teamctl.shared.settings import load_settings
from teamctl.shared.teams.teammates import DEFAULT_QUEUE

OUTAGE_S = 2.0
"""How long a query retries through a lost connection: a health check is rerun, not waited out."""


def queues_without_worker(redis_url: str, queues: list[str]) -> list[str]:
    """The queues among `queues` on which no live worker of this host is registered."""
    from rq import Queue, Worker

    conn = connect(redis_url, decode=False, outage_s=OUTAGE_S)
    try:
        here = socket.gethostname()
        return [
            name
            for name in queues
            if not any(
                w.hostname == here and not dead_here(w)
                for w in Worker.all(queue=Queue(name, connection=conn))
            )
        ]
    finally:
        conn.close()


def check(queues: list[str]) -> str | None:
    """What is wrong, in one line, or None when this host serves every queue."""
    redis_url = load_settings().redis_url
    if not redis_url:
        return "REDIS_URL is not set: no Redis to look for this host's workers in"
    try:
        missing = queues_without_worker(redis_url, queues)
    except TeamError as exc:
        return str(exc)
    if missing:
        return (
            f"no live worker of host {socket.gethostname()} is registered on {', '.join(missing)}"
        )
    return None


def main(argv: list[str]) -> int:
    """Exit status 0 (healthy) or 1 (unhealthy, with the reason on stderr)."""
    problem = check(argv or [DEFAULT_QUEUE])
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
