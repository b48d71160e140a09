"""Which Redis a command uses: --redis-url, else REDIS_URL, else this user's embedded server.
Light to import (the CLI's `--help` imports it): the embedded server's module loads on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from teamctl.shared.redis.embedded import EmbeddedRedis
    from teamctl.shared.settings import Settings


def resolve_redis_url(explicit: str | None, settings: Settings) -> str:
    """--redis-url, else REDIS_URL, else the embedded server (started on first use)."""
    if explicit:
        return explicit
    return settings.redis_url or embedded_redis(settings).ensure()


def is_embedded(explicit: str | None, settings: Settings) -> bool:
    """Whether the command uses the embedded server (no --redis-url, no REDIS_URL)."""
    return not explicit and not settings.redis_url


def embedded_redis(settings: Settings) -> EmbeddedRedis:
    """The embedded server, in the state dir's `redis`."""
    from teamctl.shared.redis.embedded import EmbeddedRedis

    return EmbeddedRedis(settings.state_dir / "redis")
