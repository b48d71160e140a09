"""Benchmarks: each module runs with `python -m bench.<name>` and prints ratios against a baseline
measured in the same run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from teamctl.shared.redis.embedded import throwaway_redis


@contextmanager
def private_redis() -> Iterator[redis.Redis]:
    """A decoded client to a throwaway redis-server (no persistence), stopped by its pid after."""
    with throwaway_redis() as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        yield client
        client.close()


def failed(what: str, log_path: Path, lines: int = 40) -> RuntimeError:
    """The error for a subprocess that failed, the last `lines` lines of its log printed first:
    the benchmarks keep those logs in temporary folders, gone by the time anyone reads the error
    (under bench.report the printing goes to the benchmark's own log)."""
    text = log_path.read_text(errors="replace") if log_path.exists() else "(no log written)"
    print(f"--- the end of {log_path.name}:", *text.splitlines()[-lines:], "---", sep="\n")
    return RuntimeError(f"{what}; the end of its log is printed before this error")
