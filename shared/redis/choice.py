"""Which Redis a command uses: --redis-url, else REDIS_URL, else this user's embedded server,
which a command that writes starts and a command that only reads attaches to when it runs.
Light to import (the CLI's `--help` imports it): the embedded server's module loads on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from teamctl.shared.redis.embedded import EmbeddedRedis
    from teamctl.shared.settings import Settings

NOTHING_TO_SHOW = "no embedded Redis running; nothing to show (`teamctl redis start` starts it)"
"""What a command that only reads says, on stderr with exit 0, when there is no server to read."""


def resolve_redis_url(explicit: str | None, settings: Settings) -> str:
    """--redis-url, else REDIS_URL, else the embedded server (started on first use)."""
    if explicit:
        return explicit
    return settings.redis_url or embedded_redis(settings).ensure()


def attach_redis_url(explicit: str | None, settings: Settings) -> str:
    """For a command that only reads: --redis-url, else REDIS_URL, else the embedded server if
    it runs (NothingToShow if not: reading never starts a server)."""
    if explicit:
        return explicit
    if settings.redis_url:
        return settings.redis_url
    url = embedded_redis(settings).attached_url()
    if url is None:
        from teamctl.shared.errors import NothingToShow

        raise NothingToShow(NOTHING_TO_SHOW)
    return url


def is_embedded(explicit: str | None, settings: Settings) -> bool:
    """Whether the command uses the embedded server (no --redis-url, no REDIS_URL)."""
    return not explicit and not settings.redis_url


def embedded_redis(settings: Settings) -> EmbeddedRedis:
    """The embedded server, in the state dir's `redis`."""
    from teamctl.shared.redis.embedded import EmbeddedRedis

    return EmbeddedRedis(settings.state_dir / "redis")
