"""Expiry of ended runs, so a Redis that serves many runs does not keep every one forever."""

from __future__ import annotations

import redis
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import is_safe_id
from teamctl.shared.keys import RUNS_INDEX, RunKeys

DEFAULT_RETENTION_S = 7 * 24 * 3600
"""How long an ended run stays inspectable (`teamctl status/tasks/messages`)."""
MAX_RETENTION_S = 365 * 24 * 3600
"""A year: far beyond any use, and well inside what Redis accepts for EXPIRE."""
SCAN_BATCH = 500


def expire_run(conn: redis.Redis, run_id: str, retention_s: int) -> int:
    """Give every key of an ended run a TTL of `retention_s`; returns how many keys got one.

    Keys are found by SCAN on the run's hash-tagged prefix, so keys other modules add are covered
    too. The bus gets its TTL first: keys a late message creates meanwhile inherit it
    (publish.lua). Keys that already expire sooner (a claim's heartbeat) keep their own TTL.
    """
    if not 1 <= retention_s <= MAX_RETENTION_S:
        raise ConfigError(
            f"retention is {retention_s}s; keep an ended run at least 1 second "
            f"and at most {MAX_RETENTION_S} seconds (a year)"
        )
    keys = RunKeys(run_id)
    conn.expire(keys.bus, int(retention_s))
    names = list(conn.scan_iter(match=keys.all_patterns(), count=SCAN_BATCH))
    pipe = conn.pipeline(transaction=False)
    for name in names:
        pipe.pttl(name)
    without_ttl = [n for n, ttl_ms in zip(names, pipe.execute(), strict=True) if ttl_ms == -1]
    for name in without_ttl:
        pipe.expire(name, int(retention_s))
    return sum(bool(done) for done in pipe.execute()) + (keys.bus in names)


def forget_expired_runs(conn: redis.Redis) -> list[str]:
    """Drop runs whose keys expired from the runs index (sorted set members cannot expire)."""
    # An id no run could have (hand-added) has no keys to check; `runs` shows it as unreadable.
    run_ids = [r for r in conn.zrange(RUNS_INDEX, 0, -1) if is_safe_id(r)]
    pipe = conn.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.exists(RunKeys(run_id).spec)
    gone = [r for r, exists in zip(run_ids, pipe.execute(), strict=True) if not exists]
    if gone:
        conn.zrem(RUNS_INDEX, *gone)
    return gone
