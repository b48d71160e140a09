"""Fenced leases: a key with a TTL, renewed by a thread, so one process drives a run (the
coordinator's lease) or a persistent team (the lead's, `lead:lease`).

It is redis-py's `Lock` with the owner string (host:pid:nonce) as its token. The token doubles as
the fencing value: the end-of-run and status writes (run_status.lua, run_finish.lua) and the
lead's memory checkpoint (lead_checkpoint.lua) check that the lease key still holds this owner in
the same Lua step, which a lock alone cannot give."""

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
from teamctl.shared.errors import ConfigError, Interrupted, RunFailed
from teamctl.shared.keys import RunKeys, TeamKeys

log = logging.getLogger(__name__)


def lease_owner() -> str:
    """host:pid:nonce, so a person can see which process drives a run."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class FencedLease:
    """Held while one process drives something (`what`, for messages); `lost` is set if another
    one took it over.

    A renewal that cannot reach Redis keeps trying, but once the TTL has passed since the last
    renewal was sent, `check` treats the lease as lost until a renewal succeeds again (it takes
    the lease back if nobody else did). The writes that matter are fenced in Redis anyway."""

    def __init__(
        self,
        conn: redis.Redis,
        key: str,
        what: str,
        ttl_s: float,
        *,
        holder: str = "process",
        owner: str | None = None,
    ) -> None:
        self.conn = conn
        self.what = what
        self.holder = holder
        """What kind of process holds it ("coordinator"), for messages."""
        self.key = key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.owner = owner or lease_owner()
        """Who holds the lease when it is taken; a RunStore writes the run's status as it."""
        # Not thread-local: the renewal thread extends what the main thread acquired.
        self._lock = conn.lock(self.key, timeout=self.ttl_ms / 1000, thread_local=False)
        self.lost = threading.Event()
        self.interrupt = threading.Event()
        """Set by another thread of this process to make the holder stop at its next check."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._valid_until_s = 0.0
        """Monotonic time the lease surely lasts until: the last renewal's send time + TTL."""
        self._abandoned = False

    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it (no renewal thread: for short one-off work)."""
        sent_s = time.monotonic()
        taken: bool = self._lock.acquire(blocking=False, token=self.owner)
        if taken:
            self._valid_until_s = sent_s + self.ttl_ms / 1000
        return taken

    def check_free(self) -> None:
        """Refuse early (before starting workers) when a live holder has the lease."""
        holder = self.conn.get(self.key)
        if holder is not None:
            ttl_ms = max(0, int(self.conn.pttl(self.key)))
            raise ConfigError(self.held_message(holder, ttl_ms))

    def held_message(self, holder: str, ttl_ms: int) -> str:
        """What a second would-be holder is told (one line, how to go on)."""
        return (
            f"{self.what} is held by {holder} (lease expires in {ttl_ms / 1000:.1f}s unless "
            "renewed)"
        )

    def acquire(self) -> None:
        """Take the lease or refuse, naming the live holder."""
        if not self.try_acquire():
            self.check_free()
            raise ConfigError(f"{self.what} is held by another {self.holder}")
        self._stop.clear()
        # Daemon: a SIGKILLed holder simply stops renewing and the lease expires.
        self._thread = threading.Thread(
            target=self._renew_forever, daemon=True, name=f"lease-{self.key}"
        )
        self._thread.start()

    def check(self) -> None:
        """Raise RunFailed once another process took the lease over: this one must stop
        writing (it was paused or cut off longer than the lease); Interrupted once this process
        asked its holder to stop."""
        if self.interrupt.is_set():
            raise Interrupted(f"the {self.holder} of {self.what} was interrupted")
        if self.lost.is_set():
            raise RunFailed(
                f"lost the lease on {self.what} to another {self.holder}; this one stops"
            )
        if time.monotonic() >= self._valid_until_s and not self._renew():
            raise RunFailed(
                f"lost the lease on {self.what} to another {self.holder} while cut "
                "off from Redis; this one stops"
            )

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

    def __enter__(self) -> FencedLease:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def _renew(self) -> bool:
        """Renew (or take back a lapsed) lease now; False, and `lost` set, if another holds it."""
        sent_s = time.monotonic()
        if not self._extend_or_retake():
            log.warning("lost the lease on %s to another %s", self.what, self.holder)
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
                log.info("renewing the lease on %s failed: %s", self.what, exc)


class Lease(FencedLease):
    """The coordinator's lease on a run: one coordinator drives it."""

    def __init__(
        self, conn: redis.Redis, keys: RunKeys, ttl_s: float, *, owner: str | None = None
    ) -> None:
        super().__init__(
            conn, keys.lease, f"run {keys.run_id}", ttl_s, holder="coordinator", owner=owner
        )
        self.run_id = keys.run_id

    def held_message(self, holder: str, ttl_ms: int) -> str:
        return (
            f"run {self.run_id} is driven by {holder} (lease expires in {ttl_ms / 1000:.1f}s "
            f"unless renewed); wait for it to finish, or `teamctl resume {self.run_id} "
            "--wait` takes over once it is gone"
        )


class LeadLease(FencedLease):
    """The lead's lease on a persistent team (`lead:lease`): one `teamctl lead` at a time; its
    owner fences the lead's memory checkpoints."""

    def __init__(
        self, conn: redis.Redis, keys: TeamKeys, ttl_s: float, *, owner: str | None = None
    ) -> None:
        super().__init__(
            conn,
            keys.lead_lease,
            f"the lead of team {keys.team}",
            ttl_s,
            holder="lead",
            owner=owner,
        )
        self.team = keys.team

    def held_message(self, holder: str, ttl_ms: int) -> str:
        return (
            f"team {self.team} is led by {holder} (lease expires in "
            f"{ttl_ms / 1000:.1f}s unless renewed); quit that lead first, or wait for the "
            "lease to expire if it died"
        )
