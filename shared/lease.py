"""The coordinator lease: a key with a TTL, renewed by a thread, so one coordinator drives a run.

It is redis-py's `Lock` with the owner string (host:pid:nonce) as its token. The token doubles as
the fencing value: the end-of-run and status writes (run_status.lua, run_finish.lua) check that
the lease key still holds this owner in the same Lua step, which a lock alone cannot give."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid

import redis
from redis.exceptions import LockError
from teamctl.shared.errors import ConfigError, RunFailed
from teamctl.shared.keys import RunKeys

log = logging.getLogger(__name__)


def lease_owner() -> str:
    """host:pid:nonce, so a person can see which process drives a run."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Lease:
    """Held while a coordinator drives a run; `lost` is set if another one took it over.

    A renewal that cannot reach Redis keeps trying, but once the TTL has passed since the last
    renewal was sent, `check` treats the lease as lost until a renewal succeeds again (it takes
    the lease back if nobody else did). The writes that matter are fenced in Redis anyway."""

    def __init__(self, conn: redis.Redis, keys: RunKeys, ttl_s: float, *,
                 owner: str | None = None) -> None:
        self.conn = conn
        self.run_id = keys.run_id
        self.key = keys.lease
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.owner = owner or lease_owner()
        """Who holds the lease when it is taken; a RunStore writes the run's status as it."""
        # Not thread-local: the renewal thread extends what the main thread acquired.
        self._lock = conn.lock(self.key, timeout=self.ttl_ms / 1000, thread_local=False)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._valid_until_s = 0.0
        """Monotonic time the lease surely lasts until: the last renewal's send time + TTL."""
        self._abandoned = False

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it (no renewal thread: for short one-off work)."""
        sent_s = time.monotonic()
        taken = self._lock.acquire(blocking=False, token=self.owner)
        if taken:
            self._valid_until_s = sent_s + self.ttl_ms / 1000
        return taken

    def check_free(self) -> None:
        """Refuse early (before starting workers) when a live coordinator holds the run."""
        holder = self.conn.get(self.key)
        if holder is not None:
            ttl_ms = max(0, int(self.conn.pttl(self.key)))
            raise ConfigError(
                f"run {self.run_id} is driven by {holder} (lease expires in {ttl_ms / 1000:.1f}s "
                "unless renewed); wait for it to finish, or `teamctl resume` it once it is gone")

    def acquire(self) -> None:
        """Take the lease or refuse, naming the live coordinator."""
        if not self.try_acquire():
            self.check_free()
            raise ConfigError(f"run {self.run_id} is driven by another coordinator")
        self._stop.clear()
        # Daemon: a SIGKILLed coordinator simply stops renewing and the lease expires.
        self._thread = threading.Thread(target=self._renew_forever, daemon=True,
                                        name=f"lease-{self.run_id}")
        self._thread.start()

    def check(self) -> None:
        """Raise RunFailed once another coordinator took the run over: this one must stop
        writing (it was paused or cut off longer than the lease)."""
        if self.lost.is_set():
            raise RunFailed(f"lost the lease on run {self.run_id} to another coordinator; "
                            "this one stops")
        if time.monotonic() >= self._valid_until_s and not self._renew():
            raise RunFailed(f"lost the lease on run {self.run_id} to another coordinator "
                            "while cut off from Redis; this one stops")

    def abandon(self) -> None:
        """Stop renewing without a word to Redis (it is unreachable): the lease expires."""
        self._abandoned = True
        self._stop.set()

    def release(self) -> None:
        """Stop renewing and drop the lease if it is still ours."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl_ms / 1000)
        if not self._abandoned:
            # Expired, or another coordinator holds it now: then it is not ours to drop.
            with contextlib.suppress(LockError):
                self._lock.release()

    def __enter__(self) -> Lease:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _renew(self) -> bool:
        """Renew (or take back a lapsed) lease now; False, and `lost` set, if another holds it."""
        sent_s = time.monotonic()
        if not self._extend_or_retake():
            log.warning("lost the lease of run %s to another coordinator", self.run_id)
            self.lost.set()
            return False
        self._valid_until_s = sent_s + self.ttl_ms / 1000
        return True

    def _extend_or_retake(self) -> bool:
        """Reset the TTL if we hold the lease, or take it back if it lapsed while nobody else
        took it (a Redis outage longer than the TTL)."""
        try:
            return bool(self._lock.reacquire())
        except LockError:
            return bool(self._lock.acquire(blocking=False, token=self.owner))

    def _renew_forever(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000):
            try:
                if not self._renew():
                    return
            except redis.RedisError as exc:  # an outage: keep trying; check() knows the TTL
                log.info("renewing the lease of %s failed: %s", self.run_id, exc)
