"""A key space's roster: the member ids its bus delivers to and trims against, with a version.

The roster lives in Redis, not in a bus's constructor, so every bus of a space agrees on it and
a persistent team can change it. Each change replaces the sorted set and bumps the version in
one transaction. A bus caches the roster by version; the scripts that depend on it (publish,
trim_bus) are given the version the caller chose inboxes by and refuse to run on a stale one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from teamctl.shared.errors import ConfigError, unreadable
from teamctl.shared.ids import RESERVED_MEMBER_IDS, check_member_id
from teamctl.shared.keys import KeySpace


@dataclass(frozen=True)
class Roster:
    """The member ids of a space (in roster order) as of one version."""

    version: int
    member_ids: tuple[str, ...]


def check_roster_id(member_id: str) -> str:
    """A member id that may have an inbox, or ConfigError (`lead`/`system` are no members)."""
    if member_id in RESERVED_MEMBER_IDS:
        raise ConfigError(f"member id {member_id!r} is reserved; choose another id")
    return check_member_id(member_id)


def queue_roster(pipe: redis.client.Pipeline, keys: KeySpace, member_ids: Sequence[str]) -> None:
    """Queue, on the caller's transaction, the roster's replacement and its version's bump."""
    ids = [check_roster_id(m) for m in member_ids]
    pipe.delete(keys.roster)
    if ids:
        pipe.zadd(keys.roster, {member_id: position for position, member_id in enumerate(ids)})
    pipe.incr(keys.roster_ver)


def write_roster(conn: redis.Redis, keys: KeySpace, member_ids: Sequence[str]) -> None:
    """Replace the roster and bump its version, in one transaction."""
    pipe = conn.pipeline(transaction=True)
    queue_roster(pipe, keys, member_ids)
    pipe.execute()


def read_roster(conn: redis.Redis, keys: KeySpace) -> Roster:
    """The roster and its version, read together (0 and no members: never written)."""
    pipe = conn.pipeline(transaction=True)
    pipe.get(keys.roster_ver)
    pipe.zrange(keys.roster, 0, -1)
    version, member_ids = pipe.execute()
    try:
        return Roster(int(version or 0), tuple(member_ids))
    except ValueError as exc:
        raise unreadable(f"{keys.label} is unreadable: its roster version", exc) from exc
