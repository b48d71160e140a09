"""The run a verb was given (an id, `last`, `last~N`, or nothing: the last run), opened; when a
reference named it, stderr says which run that is, so nobody acts on a run by surprise."""

from __future__ import annotations

from teamctl.coordinator.advice import note
from teamctl.shared.redis.connection import connect
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_refs import resolve_run


def existing_run(redis_url: str, given: str | None, *, lease_owner: str | None = None) -> RunHandle:
    """The handle of the run `given` names, which must exist (ConfigError otherwise)."""
    conn = connect(redis_url)
    named = resolve_run(conn, given)
    said = named.said()
    if said is not None:
        note(said)
    return RunHandle.existing(conn, named.run_id, lease_owner=lease_owner)
