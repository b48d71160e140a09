"""The two time units Redis sees from teamctl: wall-clock milliseconds (every stored time) and
whole-millisecond TTLs (PX)."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Wall-clock milliseconds, the unit every stored time uses."""
    return int(time.time() * 1000)


def ttl_ms(seconds: float) -> int:
    """A TTL in whole milliseconds, never 0 (Redis refuses PX 0)."""
    return max(1, int(seconds * 1000))
