"""Opening Redis connections: a clear error when the server is not there, one retry policy that
rides through restarts and failovers, and blocking reads whose socket timeout outlasts their block.

A URL is `redis://`, `rediss://`, `unix://`, or a Sentinel URL, which redis-py has no scheme for:
`redis+sentinel://[USER:PASSWORD@]HOST[:PORT],HOST[:PORT]/SERVICE[/DB][?OPTIONS]` (port 26379 by
default; `rediss+sentinel://` for TLS to the primary). It is parsed here alone, so the coordinator,
the CLI and every worker (RQ builds theirs through OutageTolerantRedis.from_url) reach the primary
the sentinels name, and follow it when they promote another.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast
from urllib.parse import parse_qsl, urlencode, urlsplit

# Before redis-py's first import: it would load OpenTelemetry's metrics SDK for nothing.
import teamctl.shared.redis.redis_py  # noqa: F401

# isort: split
import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import SSLConnection, parse_url
from redis.driver_info import DriverInfo
from redis.retry import Retry
from redis.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from teamctl.shared.errors import ConfigError, InfraError
from teamctl.shared.redis.url_secrets import (
    PERCENT_ENCODING,
    misplaced_userinfo,
    redacted,
    scrubbed,
)

log = logging.getLogger(__name__)

MIN_REDIS_VERSION = (6, 2)
"""Exclusive XRANGE bounds and XTRIM MINID, used by the bus, arrived in Redis 6.2."""
USE_EMBEDDED = "give neither REDIS_URL nor --redis-url to use the embedded one"
"""The way back to the embedded Redis, whichever of the two named this one."""
DEFAULT_OUTAGE_S = 60.0
"""How long a command keeps retrying through a Redis outage (the run option redis_outage_s)."""
SOCKET_TIMEOUT_S = 5.0
"""A reply slower than this counts as a lost connection (and is retried)."""
MAX_BLOCK_MS = 10_000
"""The longest any blocking read (XREAD BLOCK, BLPOP) waits; blocking clients' socket timeout
outlasts it, else a quiet stream would look like a dead server."""
BACKOFF_CAP_S = 2.0
BACKOFF_BASE_S = 0.05
SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
"""Sentinel URL schemes, each with the scheme of its primary's connections."""
SENTINEL_PORT = 26379
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
"""Query options of a Sentinel URL meant for the sentinels, not the primary."""
EVICTING_POLICIES_OK = frozenset({"noeviction"})
"""The maxmemory-policy under which Redis never drops teamctl's keys (it refuses writes instead,
which teamctl reports)."""


class OutageRetry(Retry):  # type: ignore[misc]  # redis is Any to mypy: see pyproject
    """redis-py's Retry (exponential backoff with jitter on connection and timeout errors),
    bounded by time rather than by count, so every caller gives up after the same outage."""

    def __init__(self, outage_s: float) -> None:
        super().__init__(
            ExponentialWithJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), retries=-1
        )
        # A write refused by a read-only server is retried too (on a new connection: the
        # failure callback disconnects): a primary demoted in a failover behind a name that
        # then moves to the new one (a managed endpoint) heals within the outage, like a
        # restart. Other refusals (a bad command, OOM) are not: waiting would not help.
        self.update_supported_errors([redis.ResponseError])
        self.outage_s = outage_s

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> Any:
        """Retry `do` until it succeeds or the outage has lasted `outage_s`."""
        give_up_at = time.monotonic() + self.outage_s

        def retryable(error: Exception) -> bool:
            if isinstance(error, redis.ResponseError) and not read_only_refusal(error):
                return False
            return is_retryable is None or is_retryable(error)

        def fail_or_give_up(error: Exception, *failures: int) -> None:
            fail(error, *failures)
            if time.monotonic() >= give_up_at:
                raise error

        return super().call_with_retry(do, fail_or_give_up, retryable, with_failure_count)


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
        sentinel = SentinelURL.parse(url)
        if sentinel is not None:  # RQ's CLI calls this for every worker's -u / RQ_REDIS_URL
            return sentinel.client(cls, **kwargs)
        # redis-py annotates from_url as returning Redis (and is Any to mypy here), though it
        # builds `cls`.
        return cast(OutageTolerantRedis, super().from_url(url, **kwargs))


WORKER_CONNECTION_CLASS = f"{__name__}.{OutageTolerantRedis.__name__}"
"""What RQ_CONNECTION_CLASS names for teamctl's workers."""
WORKER_CLASS = "teamctl.worker.warm_fork.WarmForkWorker"
"""What RQ_WORKER_CLASS names for teamctl's workers (named here: the coordinator, which starts
workers, never imports the worker package)."""
FINISHING_WORKER_CLASSES = frozenset({WORKER_CLASS, "teamctl.worker.rq_worker.TeamctlWorker"})
"""The worker classes that finish a preload their worker started without (a run's first worker,
forked early: worker/preload.py); another class gets the whole preload before its first job."""


ClientT = TypeVar("ClientT", bound=redis.Redis)


@dataclass(frozen=True)
class SentinelURL:
    """A `redis+sentinel://` URL, parsed: where the sentinels are, which service they watch,
    and how to talk to the primary they name (and to themselves)."""

    sentinels: list[tuple[str, int]]
    service: str
    primary_kwargs: dict[str, Any] = field(default_factory=dict)
    """db, credentials, TLS and query options for the primary's connections."""
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, url: str) -> SentinelURL | None:
        """The Sentinel URL `url` names; None for any other scheme; ValueError if malformed."""
        scheme, sep, rest = url.partition("://")
        primary_scheme = SENTINEL_SCHEMES.get(scheme.lower()) if sep else None
        if primary_scheme is None:
            return None
        netloc, _, path_query = rest.partition("/")
        path, _, query = path_query.partition("?")
        userinfo, _, hosts = netloc.rpartition("@")
        sentinels = [_host_port(h) for h in hosts.split(",") if h.strip()]
        segments = [s for s in path.split("/") if s]
        if not sentinels or not segments or len(segments) > 2:
            raise ValueError(
                "a Sentinel URL names its sentinels and service: "
                "redis+sentinel://HOST[:PORT],HOST[:PORT]/SERVICE[/DB]"
            )
        options = parse_qsl(query, keep_blank_values=True)
        own = [(k, v) for k, v in options if k not in SENTINEL_OPTIONS]
        sentinel_kwargs: dict[str, Any] = {
            "socket_timeout": SOCKET_TIMEOUT_S,
            "socket_connect_timeout": SOCKET_TIMEOUT_S,
        }
        for key, value in options:
            if key in SENTINEL_OPTIONS:
                sentinel_kwargs[key.removeprefix("sentinel_")] = value
        # redis-py parses the rest (credentials, db, query options) as for one server.
        primary = parse_url(
            f"{primary_scheme}://{userinfo + '@' if userinfo else ''}primary"
            f"/{segments[1] if len(segments) > 1 else 0}" + (f"?{urlencode(own)}" if own else "")
        )
        primary.pop("host", None)
        if primary.pop("connection_class", None) is SSLConnection:
            primary["ssl"] = True  # SentinelConnectionPool picks its TLS connection class
        return cls(sentinels, segments[0], primary, sentinel_kwargs)

    def client(self, cls: type[ClientT], **kwargs: Any) -> ClientT:
        """A `cls` client of the current primary, which follows a promotion (redis-py's
        SentinelConnectionPool asks the sentinels again whenever a connection is made)."""
        kwargs = {**self.primary_kwargs, **kwargs}
        # One try per sentinel: discovery moves on to the next one, and a connection to the
        # primary retries the whole discovery under its own (outage) retry.
        sentinel_kwargs = {
            **self.sentinel_kwargs,
            "retry": Retry(ExponentialWithJitterBackoff(), retries=0),
        }
        manager = Sentinel(self.sentinels, sentinel_kwargs=sentinel_kwargs)
        kwargs["connection_class"] = (
            PrimarySSLConnection if kwargs.pop("ssl", False) else PrimaryConnection
        )
        return cast(ClientT, manager.master_for(self.service, redis_class=cls, **kwargs))


class _AsksSentinels:
    """Reconnects through the sentinels. redis-py 8.1 reconnects a dropped connection inside
    send_packed_command by connect_check_health, to the address it had, skipping the sentinel
    lookup its connect() makes: after a failover every retry dialled the dead primary until
    the outage window ran out."""

    _sock: Any

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[attr-defined]  # SentinelManagedConnection's
        super().send_packed_command(command, check_health)  # type: ignore[misc]


class PrimaryConnection(_AsksSentinels, SentinelManagedConnection):  # type: ignore[misc]
    """A connection to whichever server the sentinels name primary, found again at every
    reconnect."""


class PrimarySSLConnection(_AsksSentinels, SentinelManagedSSLConnection):  # type: ignore[misc]
    """PrimaryConnection over TLS (rediss+sentinel://)."""


def _host_port(text: str) -> tuple[str, int]:
    """HOST[:PORT] of one sentinel ([IPv6] in brackets); ValueError if the port is not one."""
    parts = urlsplit(f"//{text.strip()}")
    if not parts.hostname:
        raise ValueError(f"no sentinel host in {text!r}")
    return parts.hostname, parts.port or SENTINEL_PORT


def client_from_url(url: str, **kwargs: Any) -> redis.Redis:
    """A redis.Redis for `url`, a Sentinel URL included; ValueError if malformed."""
    sentinel = SentinelURL.parse(url)
    if sentinel is not None:
        return sentinel.client(redis.Redis, **kwargs)
    return redis.Redis.from_url(url, **kwargs)


def connect(url: str, *, decode: bool = True, outage_s: float = DEFAULT_OUTAGE_S) -> redis.Redis:
    """Connect and ping; board and bus use decoded strings, RQ needs bytes (decode=False)."""
    if misplaced_userinfo(url):  # refused before a parser reads part of the password as a host
        raise ConfigError(
            f"invalid Redis URL {redacted(url)!r}: its user or password holds /, ?, #, "
            f"[ or ], which a URL parser reads as part of the host; percent-encode them "
            f"({PERCENT_ENCODING})"
        )
    try:
        # No retries for the first contact: a server that is not there is a setup problem, not
        # an outage to wait out. The outage policy applies from the first reply on.
        conn = client_from_url(
            url,
            decode_responses=decode,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            socket_timeout=SOCKET_TIMEOUT_S,
            health_check_interval=30,
            retry=Retry(ExponentialWithJitterBackoff(), retries=0),
            driver_info=_driver_info(),
        )
    except ValueError as exc:
        raise ConfigError(
            f"invalid Redis URL {redacted(url)!r}: {scrubbed(str(exc), url)}; use "
            "redis://HOST:PORT/DB or redis+sentinel://HOST:PORT,HOST:PORT/SERVICE"
        ) from None
    try:
        conn.ping()
    except redis.RedisError as exc:
        raise InfraError(
            f"cannot reach Redis at {redacted(url)}: {scrubbed(str(exc), url).rstrip('.')}. "
            f"Start it, or {USE_EMBEDDED}"
        ) from exc
    _check_version(conn, url)
    if not isinstance(conn.connection_pool, SentinelConnectionPool):
        _check_primary(conn, url)
    warn_if_evicting(conn)
    set_outage(conn, outage_s)
    return conn


@contextmanager
def redis_errors_as_infra() -> Iterator[None]:
    """Redis's own errors (an outage outlasting the retries, a refused command) as one-line
    InfraErrors that say what to fix: the CLI prints them, the Python API raises them."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise InfraError(f"Redis is unreachable: {exc}") from exc
    except redis.ResponseError as exc:
        raise InfraError(refusal_message(exc)) from exc


def read_only_refusal(error: Exception) -> bool:
    """A write refused by a read-only replica (READONLY), raised as such or, from a Lua script
    on Redis 6.2, inside the script's error ("... -READONLY You can't write ...")."""
    return isinstance(error, redis.ReadOnlyError) or (
        isinstance(error, redis.ResponseError) and _has_code(str(error), "READONLY")
    )


def refusal_message(error: redis.ResponseError) -> str:
    """One line for a command Redis refused: for the refusals an operator fixes (a read-only
    replica, out of memory, a failing disk), what is wrong and what to do."""
    text = str(error)
    if read_only_refusal(error):
        return (
            "Redis refused a write: REDIS_URL points at a read-only replica (or a primary "
            "demoted by a failover). Point it at the primary, or use a redis+sentinel:// URL "
            f"so teamctl follows failovers ({text})"
        )
    if isinstance(error, redis.OutOfMemoryError) or _has_code(text, "OOM"):
        return (
            "Redis is out of memory: used memory is over maxmemory and maxmemory-policy "
            "noeviction refuses writes. Raise maxmemory or free memory (finished runs' keys "
            f"expire after their retention) ({text})"
        )
    if _has_code(text, "MISCONF"):
        return (
            "Redis refuses writes: it cannot save its RDB snapshot to disk. Fix its data "
            "dir (space, permissions; see its log), or set stop-writes-on-bgsave-error no "
            f"if you accept the risk ({text})"
        )
    return f"Redis refused a command: {text}"


def _has_code(text: str, code: str) -> bool:
    """Does a Redis error read as error code `code`: first word, or (Redis 6.2 wraps errors
    raised in a Lua script) after a '-' inside the script's error?"""
    return text.startswith(code + " ") or f"-{code} " in text


_eviction_warned = False


def warn_if_evicting(conn: redis.Redis) -> None:
    """Warn (once per process) when Redis may evict keys to stay under maxmemory: a claim,
    heartbeat or worker key evicted looks like a dead worker, a task hash evicted is lost work.
    Read from INFO memory: managed Redis often refuses CONFIG GET."""
    global _eviction_warned
    if _eviction_warned:
        return
    memory = conn.info("memory")
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if int(memory.get("maxmemory", 0) or 0) > 0 and policy not in EVICTING_POLICIES_OK:
        _eviction_warned = True
        log.warning(
            "Redis maxmemory-policy is %s: it may evict teamctl's keys (claims, "
            "heartbeats, tasks) when memory runs short. Set maxmemory-policy noeviction "
            "(writes are then refused with an error instead)",
            policy,
        )


def _driver_info() -> DriverInfo:
    """Name redis-py's version ourselves: left to itself, every new connection asks
    importlib.metadata, which costs ~7 ms in each freshly forked RQ job."""
    return DriverInfo(lib_version=redis.__version__)


def _check_version(conn: redis.Redis, url: str) -> None:
    version = str(conn.info("server").get("redis_version", "0"))
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_REDIS_VERSION:
        raise ConfigError(
            f"Redis at {redacted(url)} is version {version}; teamctl needs 6.2 or "
            f"newer (or {USE_EMBEDDED})"
        )


def _check_primary(conn: redis.Redis, url: str) -> None:
    """A URL naming a replica is a setup mistake: every write would be refused."""
    if conn.info("replication").get("role") == "slave":
        raise ConfigError(
            f"Redis at {redacted(url)} is a read-only replica; point REDIS_URL at "
            "the primary, or use a redis+sentinel:// URL"
        )


def same_server(
    conn: redis.Redis,
    *,
    decode: bool,
    outage_s: float = DEFAULT_OUTAGE_S,
    socket_timeout_s: float = SOCKET_TIMEOUT_S,
) -> redis.Redis:
    """A second client to the server `conn` talks to, with our retry policy and timeouts (and,
    through Sentinel, to whichever server is the primary when it connects)."""
    pool = conn.connection_pool
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(
        decode_responses=decode,
        retry=OutageRetry(outage_s),
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=min(socket_timeout_s, SOCKET_TIMEOUT_S),
    )
    kwargs.setdefault("driver_info", _driver_info())
    if isinstance(pool, SentinelConnectionPool):
        kwargs.pop("connection_pool", None)  # the old pool's proxy: the new pool makes its own
        return redis.Redis(
            connection_pool=SentinelConnectionPool(
                pool.service_name,
                pool.sentinel_manager,
                is_master=pool.is_master,
                connection_class=pool.connection_class,
                **kwargs,
            )
        )
    return redis.Redis(
        connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
    )


@functools.lru_cache(maxsize=1)
def decoded_beside(rq_conn: redis.Redis) -> redis.Redis:
    """A decoded client to the server of an RQ worker's client `rq_conn`, made once per
    process: the jobs of a kept process (its run's next tasks) share its connections instead
    of opening one per job."""
    return same_server(rq_conn, decode=True)


def outage_of(conn: redis.Redis, default_s: float = DEFAULT_OUTAGE_S) -> float:
    """How long a command of `conn` retries through an outage (`default_s` for a client
    without our retry policy), for a second client that should ride out the same."""
    retry = conn.connection_pool.connection_kwargs.get("retry")
    return retry.outage_s if isinstance(retry, OutageRetry) else default_s


def blocking_client(conn: redis.Redis, name: str | None = None) -> redis.Redis:
    """A client for blocking reads of at most MAX_BLOCK_MS, on its own connections; `name`
    labels them in CLIENT LIST (who is following what)."""
    client = same_server(
        conn,
        decode=bool(conn.connection_pool.connection_kwargs.get("decode_responses")),
        outage_s=outage_of(conn),
        socket_timeout_s=MAX_BLOCK_MS / 1000 + SOCKET_TIMEOUT_S,
    )
    if name is not None:
        client.connection_pool.connection_kwargs["client_name"] = name
    return client


def set_outage(conn: redis.Redis, outage_s: float) -> None:
    """Bound `conn`'s retries by a run's redis_outage_s (known once its spec is read). A client
    a kept process's jobs share is left alone when it has that bound already: its connections
    may be in another thread's hands (a keep-alive of the job before)."""
    if outage_of(conn, default_s=-1.0) != outage_s:
        conn.set_retry(OutageRetry(outage_s))


def block_ms(wanted_ms: float) -> int:
    """A block time capped at MAX_BLOCK_MS (and at least 1 ms: 0 would mean forever)."""
    return max(1, min(int(wanted_ms), MAX_BLOCK_MS))
