"""Waiting on a condition with a deadline, and checking a key's TTL against when it was set."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import redis


def wait_until(
    predicate: Callable[[], object],
    timeout_s: float = 30.0,
    interval_s: float = 0.02,
    message: str = "condition",
) -> object:
    """Poll `predicate` until it returns something truthy, or fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message}")
        time.sleep(interval_s)


def assert_ttl_as_set(conn: redis.Redis, key: str, ttl_s: float, set_at: float) -> None:
    """`key` expires `ttl_s` after the write that began at `set_at` (time.monotonic() taken just
    before it): its TTL may have lost only the milliseconds that passed since."""
    left_ms = conn.pttl(key)
    elapsed_ms = math.ceil((time.monotonic() - set_at) * 1000)
    ttl_ms = round(ttl_s * 1000)
    # Redis keeps expiry times in whole milliseconds: the set and the read may each round by one.
    assert ttl_ms - elapsed_ms - 2 <= left_ms <= ttl_ms, (key, left_ms, ttl_ms, elapsed_ms)
