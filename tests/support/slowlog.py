"""The rule that no script blocks Redis for more than a few milliseconds, checked two ways: how
much each script call of a board carries (exact), and what SLOWLOG kept (timing, with the noise
a loaded 2-core host adds; the benchmarks measure it unloaded)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from teamctl.shared.redis.scripts import Scripts, sources

SLOW_US = 5000
"""The rule: no script blocks Redis for more than 5 ms."""
NOISE_OUTLIERS = 3
NOISE_CEILING_MS = 25.0
"""A loaded 2-core CI host can deschedule Redis in the middle of a sub-millisecond script; a
few such outliers are tolerated, each far below what an unpaged walk costs here (tens of ms)."""


@contextmanager
def slowlog_at_the_rule(conn: redis.Redis) -> Iterator[None]:
    """SLOWLOG at the 5 ms rule, emptied first; the server's setting restored after."""
    before = conn.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    conn.config_set("slowlog-log-slower-than", SLOW_US)
    conn.slowlog_reset()
    try:
        yield
    finally:
        conn.config_set("slowlog-log-slower-than", before)


def slow_scripts_ms(conn: redis.Redis, shas: set[str] | None = None) -> list[float]:
    """The script calls SLOWLOG kept (over 5 ms), in ms, slowest first; only the scripts of
    `shas` when given (the server is shared with other tests' databases)."""
    found = []
    for entry in conn.slowlog_get(1024):
        command = entry["command"]
        words = (command.decode() if isinstance(command, bytes) else command).split(" ")
        if words[0].upper() not in ("EVALSHA", "EVAL"):
            continue
        if shas is None or (len(words) > 1 and words[1] in shas):
            found.append(entry["duration"] / 1000)
    return sorted(found, reverse=True)


def script_shas(*names: str) -> set[str]:
    """The SHA1s under which these scripts run (SLOWLOG names a script by it)."""
    return {hashlib.sha1(sources()[name].encode()).hexdigest() for name in names}


def within_the_rule(slow_ms: list[float], calls: int = 0) -> bool:
    """No script over 5 ms, bar the outliers of a loaded host (a few, or one in a hundred of
    `calls` when a test makes many), none near an unpaged walk: a script that walks what it
    should page is slow on most of its calls, and each far over the ceiling."""
    outliers = max(NOISE_OUTLIERS, calls // 100)
    return len(slow_ms) <= outliers and all(ms < NOISE_CEILING_MS for ms in slow_ms)


def first_within_the_rule(
    measure: Callable[[], list[float]], attempts: int = 3, calls: int = 0
) -> list[float]:
    """The slow scripts of the first of `attempts` measurements within the rule, else of the
    last: an unpaged walk is slow on every attempt, a loaded host's outliers come and go."""
    slow = measure()
    for _ in range(attempts - 1):
        if within_the_rule(slow, calls):
            break
        slow = measure()
    return slow


class CountedScripts(Scripts):
    """Scripts that note the number of keys each call carried, by script name: how much one
    call had to walk, whatever the host's speed."""

    def __init__(self, conn: redis.Redis) -> None:
        super().__init__(conn)
        self.keys_per_call: list[tuple[str, int]] = []

    def __getitem__(self, name: str) -> Any:
        script = super().__getitem__(name)

        def call(*, keys: list[str], args: list[Any], **options: Any) -> Any:
            self.keys_per_call.append((name, len(keys)))
            return script(keys=keys, args=args, **options)

        return call

    def most_keys(self, name: str) -> int:
        """The most keys one call of `name` carried (0: never called)."""
        return max((n for called, n in self.keys_per_call if called == name), default=0)
