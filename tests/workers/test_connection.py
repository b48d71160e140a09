"""Connections a forked RQ job opens: no per-connection lookup of redis-py's own version."""

from __future__ import annotations

import os
from importlib import metadata

import redis
from teamctl.shared.redis.connection import OutageTolerantRedis, connect, same_server


def _ping_in_fork_without_metadata(conn: redis.Redis) -> int:
    """Ping from a forked child (a new connection: the pool resets on a new pid) in which
    importlib.metadata.version raises; the child's exit status, 0 when the ping worked."""
    pid = os.fork()
    if pid == 0:
        status = 1
        try:

            def refuse(name: str) -> str:
                raise AssertionError(f"a new connection asked importlib.metadata for {name}")

            metadata.version = refuse  # type: ignore[assignment]
            status = 0 if conn.ping() else 1
        finally:
            os._exit(status)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_worker_client_class_names_its_driver_version_so_a_forked_job_asks_nothing(
    redis_url: str,
) -> None:
    conn = OutageTolerantRedis.from_url(redis_url)
    assert conn.ping()
    info = conn.connection_pool.connection_kwargs["driver_info"]
    assert info.lib_version == redis.__version__
    assert _ping_in_fork_without_metadata(conn) == 0


def test_teamctl_clients_name_their_driver_version_too(redis_url: str) -> None:
    for conn in (
        connect(redis_url),
        same_server(OutageTolerantRedis.from_url(redis_url), decode=True),
    ):
        assert (
            conn.connection_pool.connection_kwargs["driver_info"].lib_version == redis.__version__
        )
        assert _ping_in_fork_without_metadata(conn) == 0
