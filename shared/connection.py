"""Opening Redis connections with a clear error when the server is not there."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis.driver_info import DriverInfo

from shared.errors import ConfigError, InfraError

MIN_REDIS_VERSION = (6, 2)
"""Exclusive XRANGE bounds and XTRIM MINID, used by the bus, arrived in Redis 6.2."""


def connect(url: str, *, decode: bool = True) -> redis.Redis:
    """Connect and ping; board and bus use decoded strings, RQ needs bytes (decode=False)."""
    try:
        conn = redis.Redis.from_url(
            url, decode_responses=decode, socket_connect_timeout=5, health_check_interval=30,
            driver_info=_driver_info())
    except ValueError as exc:
        raise ConfigError(f"invalid Redis URL {redacted(url)!r}: {exc}; "
                          "use redis://HOST:PORT/DB") from exc
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise InfraError(
            f"cannot reach Redis at {redacted(url)}: {exc}. Start it, or unset REDIS_URL to use "
            "the embedded one"
        ) from exc
    _check_version(conn, url)
    return conn


def redacted(url: str) -> str:
    """The URL with its password masked, for messages and logs (the embedded server's URL
    carries one)."""
    parts = urlsplit(url)
    netloc, query = parts.netloc, parts.query
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[1]}"
    if "password=" in query:
        query = urlencode([(k, "***" if k == "password" else v) for k, v in parse_qsl(query)],
                          safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _driver_info() -> DriverInfo:
    """Name redis-py's version ourselves: left to itself, every new connection asks
    importlib.metadata, which costs ~7 ms in each freshly forked RQ job."""
    return DriverInfo(lib_version=redis.__version__)


def _check_version(conn: redis.Redis, url: str) -> None:
    version = str(conn.info("server").get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_REDIS_VERSION:
        raise ConfigError(f"Redis at {redacted(url)} is version {version}; teamctl needs 6.2 or "
                          "newer (or unset REDIS_URL to use the embedded one)")


def same_server(conn: redis.Redis, *, decode: bool) -> redis.Redis:
    """A second client to the server `conn` talks to, with another decode setting."""
    kwargs = dict(conn.connection_pool.connection_kwargs)
    kwargs["decode_responses"] = decode
    kwargs.setdefault("driver_info", _driver_info())
    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=conn.connection_pool.connection_class, **kwargs))
