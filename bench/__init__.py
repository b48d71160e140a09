"""Benchmarks: each module runs with `python -m bench.<name>` and prints ratios against a baseline
measured in the same run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from teamctl.shared.redis.embedded import throwaway_redis


@contextmanager
def private_redis() -> Iterator[redis.Redis]:
    """A decoded client to a throwaway redis-server (no persistence), stopped by its pid after."""
    with throwaway_redis() as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        yield client
        client.close()
