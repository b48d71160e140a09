"""Naming a run without copying its id: `last` is the most recently started run `teamctl runs`
lists, `last~N` the one N runs before it. Every verb that takes a run resolves it here."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import check_run_id
from teamctl.shared.runs.store import recent_runs
from teamctl.shared.text import counted, quoted

LAST = "last"
"""The reference to the last run; `last~N` counts back from it."""
BACK = "~"


@dataclass(frozen=True)
class NamedRun:
    """A run as the user named it: its id, and how many runs before the last one it is when a
    reference named it (None when the id itself was given)."""

    run_id: str
    back: int | None = None

    def said(self) -> str | None:
        """What stderr says of a run a reference named (`run X (the last run)`); None for an
        id given as it is."""
        if self.back is None:
            return None
        if self.back == 0:
            return f"run {self.run_id} (the last run)"
        before = (
            "the run before the last" if self.back == 1 else f"{self.back} runs before the last"
        )
        return f"run {self.run_id} ({LAST}{BACK}{self.back}, {before})"


def runs_back(given: str) -> int | None:
    """How many runs before the last one `given` names (0 for `last`); None when it is not a
    reference, ConfigError for a `last~` that does not count (`last~0`, `last~x`)."""
    if given == LAST:
        return 0
    if not given.startswith(LAST + BACK):
        return None
    count = given[len(LAST + BACK) :]
    if not (count.isascii() and count.isdigit()) or int(count) < 1:
        raise ConfigError(
            f"invalid run reference {quoted(given)}: use `{LAST}` for the last run "
            f"or `{LAST}{BACK}N`, N 1 or more, for the Nth run before it"
        )
    return int(count)


def resolve_run(conn: redis.Redis, given: str | None) -> NamedRun:
    """The run `given` names: an id (checked as every run id is), `last`, `last~N`; None means
    the last run. ConfigError when there are not that many runs."""
    back = 0 if given is None else runs_back(given)
    if back is None:
        return NamedRun(check_run_id(str(given)))
    found = recent_runs(conn, back + 1)
    if not found:
        raise ConfigError("no runs recorded yet: `teamctl run OBJECTIVE` starts one")
    if len(found) <= back:
        verb = "is" if len(found) == 1 else "are"
        raise ConfigError(
            f"no run {LAST}{BACK}{back}: only {counted(len(found), 'run')} {verb} "
            "recorded (`teamctl runs` lists them)"
        )
    return NamedRun(check_run_id(found[back]), back)


def new_run_id() -> str:
    """A sortable, unique run id: creation time plus a random suffix."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def check_new_run_id(run_id: str) -> str:
    """A new run's id, checked as every run id is, and not `last`, which names another run."""
    if run_id == LAST:
        raise ConfigError(
            f"run id {quoted(run_id)} is reserved: `{LAST}` names the most "
            "recent run; pass another --run-id"
        )
    return check_run_id(run_id)
