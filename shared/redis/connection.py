"""Opening Redis connections: a clear error when the server is not there, one retry policy that
rides through restarts, and blocking reads whose socket timeout outlasts their block."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.driver_info import DriverInfo
from redis.retry import Retry
from teamctl.shared.errors import ConfigError, InfraError

MIN_REDIS_VERSION = (6, 2)
"""Exclusive XRANGE bounds and XTRIM MINID, used by the bus, arrived in Redis 6.2."""
DEFAULT_OUTAGE_S = 60.0
"""How long a command keeps retrying through a Redis outage (the run option redis_outage_s)."""
SOCKET_TIMEOUT_S = 5.0
"""A reply slower than this counts as a lost connection (and is retried)."""
MAX_BLOCK_MS = 10_000
"""The longest any blocking read (XREAD BLOCK, BLPOP) waits; blocking clients' socket timeout
outlasts it, else a quiet stream would look like a dead server."""
BACKOFF_CAP_S = 2.0
BACKOFF_BASE_S = 0.05


class OutageRetry(Retry):  # type: ignore[misc]  # redis is Any to mypy: see pyproject
    """redis-py's Retry (exponential backoff with jitter on connection and timeout errors),
    bounded by time rather than by count, so every caller gives up after the same outage."""

    def __init__(self, outage_s: float) -> None:
        super().__init__(ExponentialWithJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S),
                         retries=-1)
        self.outage_s = outage_s

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        """Retry `do` until it succeeds or the outage has lasted `outage_s`."""
        give_up_at = time.monotonic() + self.outage_s

        def fail_or_give_up(error: Exception, *failures: int) -> None:
            fail(error, *failures)
            if time.monotonic() >= give_up_at:
                raise error

        return super().call_with_retry(do, fail_or_give_up, is_retryable, with_failure_count)


class OutageTolerantRedis(redis.Redis):  # type: ignore[misc]  # redis is Any: see pyproject
    """The client class for RQ workers (RQ_CONNECTION_CLASS): RQ's own calls, a worker watching
    its job among them, ride through a Redis outage as teamctl's do, instead of quitting."""

    outage_s = DEFAULT_OUTAGE_S
    """How long its commands retry; the worker's settings module sets it from
    TEAMCTL_REDIS_OUTAGE_S before RQ connects."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> OutageTolerantRedis:
        kwargs.setdefault("retry", OutageRetry(cls.outage_s))
        # RQ's forked job opens its own connection (the pool resets on a new pid): without this
        # each one asks importlib.metadata for redis-py's version (~9 ms, ~400 page copies a job).
        kwargs.setdefault("driver_info", _driver_info())
        # redis-py annotates from_url as returning Redis (and is Any to mypy here), though it
        # builds `cls`.
        return cast(OutageTolerantRedis, super().from_url(url, **kwargs))


WORKER_CONNECTION_CLASS = f"{__name__}.{OutageTolerantRedis.__name__}"
"""What RQ_CONNECTION_CLASS names for teamctl's workers."""
WORKER_CLASS = "teamctl.worker.rq_worker.TeamctlWorker"
"""What RQ_WORKER_CLASS names for teamctl's workers (named here: the coordinator, which starts
workers, never imports the worker package)."""


def connect(url: str, *, decode: bool = True, outage_s: float = DEFAULT_OUTAGE_S) -> redis.Redis:
    """Connect and ping; board and bus use decoded strings, RQ needs bytes (decode=False)."""
    try:
        # No retries for the first contact: a server that is not there is a setup problem, not
        # an outage to wait out. The outage policy applies from the first reply on.
        conn = redis.Redis.from_url(
            url, decode_responses=decode, socket_connect_timeout=SOCKET_TIMEOUT_S,
            socket_timeout=SOCKET_TIMEOUT_S, health_check_interval=30,
            retry=Retry(ExponentialWithJitterBackoff(), retries=0), driver_info=_driver_info())
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
    set_outage(conn, outage_s)
    return conn


@contextmanager
def redis_errors_as_infra() -> Iterator[None]:
    """Redis's own errors (an outage outlasting the retries, a refused command) as one-line
    InfraErrors: the CLI prints them, the Python API raises them."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise InfraError(f"Redis is unreachable: {exc}") from exc
    except redis.ResponseError as exc:
        raise InfraError(f"Redis refused a command: {exc}") from exc


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


def same_server(conn: redis.Redis, *, decode: bool, outage_s: float = DEFAULT_OUTAGE_S,
                socket_timeout_s: float = SOCKET_TIMEOUT_S) -> redis.Redis:
    """A second client to the server `conn` talks to, with our retry policy and timeouts."""
    kwargs = dict(conn.connection_pool.connection_kwargs)
    kwargs.update(decode_responses=decode, retry=OutageRetry(outage_s),
                  socket_timeout=socket_timeout_s,
                  socket_connect_timeout=min(socket_timeout_s, SOCKET_TIMEOUT_S))
    kwargs.setdefault("driver_info", _driver_info())
    return redis.Redis(connection_pool=redis.ConnectionPool(
        connection_class=conn.connection_pool.connection_class, **kwargs))


def blocking_client(conn: redis.Redis, name: str | None = None) -> redis.Redis:
    """A client for blocking reads of at most MAX_BLOCK_MS, on its own connections; `name`
    labels them in CLIENT LIST (who is following what)."""
    kwargs = conn.connection_pool.connection_kwargs
    retry = kwargs.get("retry")
    client = same_server(conn, decode=bool(kwargs.get("decode_responses")),
                         outage_s=retry.outage_s if isinstance(retry, OutageRetry)
                         else DEFAULT_OUTAGE_S,
                         socket_timeout_s=MAX_BLOCK_MS / 1000 + SOCKET_TIMEOUT_S)
    if name is not None:
        client.connection_pool.connection_kwargs["client_name"] = name
    return client


def set_outage(conn: redis.Redis, outage_s: float) -> None:
    """Bound `conn`'s retries by a run's redis_outage_s (known once its spec is read)."""
    conn.set_retry(OutageRetry(outage_s))


def block_ms(wanted_ms: float) -> int:
    """A block time capped at MAX_BLOCK_MS (and at least 1 ms: 0 would mean forever)."""
    return max(1, min(int(wanted_ms), MAX_BLOCK_MS))
