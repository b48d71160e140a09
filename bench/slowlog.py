"""SLOWLOG as the benchmarks read it: the rule is that no script blocks Redis for 5 ms."""

from __future__ import annotations

import hashlib
from collections import Counter

import redis
from pydantic import BaseModel
from teamctl.shared.redis.scripts import sources

SLOW_US = 5000
"""The slowlog threshold the benchmarks set: a command over it breaks the rule."""
ENTRIES = 1024


class Slowest(BaseModel):
    """The longest command SLOWLOG kept since the last reset, and how many went over."""

    ms: float = 0.0
    name: str = "-"
    over: int = 0
    by_name: dict[str, int] = {}
    """Commands over the threshold per script: one preempted call on a busy machine shows once,
    a script that is slow by its size shows every time it runs."""

    def note(self) -> str:
        """What the report says beside the worst: which script, how many went over, by whom."""
        top = ", ".join(
            f"{name} {n}" for name, n in sorted(self.by_name.items(), key=lambda item: -item[1])[:4]
        )
        return f"{self.name}; {self.over} commands over 5 ms" + (f" ({top})" if top else "")


def watch(conn: redis.Redis) -> None:
    """Log every command over SLOW_US, from now on (the server's log starts empty)."""
    conn.config_set("slowlog-max-len", ENTRIES)
    conn.config_set("slowlog-log-slower-than", SLOW_US)
    conn.slowlog_reset()


def _script_names() -> dict[str, str]:
    """Our scripts' SHA1 -> file name, so an EVALSHA entry says which script it was."""
    return {hashlib.sha1(text.encode()).hexdigest(): name for name, text in sources().items()}


def _name(command: object, names: dict[str, str]) -> str:
    text = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    words = text.split(" ")
    if words[0].upper() == "EVALSHA" and len(words) > 1:
        return names.get(words[1], f"EVALSHA {words[1][:8]}")
    return words[0]


def slowest(conn: redis.Redis) -> Slowest:
    """The worst entry since `watch` or the last call, then the log is emptied for the next
    scenario."""
    entries = conn.slowlog_get(ENTRIES)
    conn.slowlog_reset()
    if not entries:
        return Slowest()
    names = _script_names()
    worst = max(entries, key=lambda e: e["duration"])
    return Slowest(
        ms=worst["duration"] / 1000,
        name=_name(worst["command"], names),
        over=len(entries),
        by_name=Counter(_name(e["command"], names) for e in entries),
    )
