"""A Redis primary, one replica and three sentinels on loopback, for failover tests: every process
is a plain `redis-server` (`--sentinel` for the sentinels), started here and stopped by its pid."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.redis.embedded import free_port, redis_server_binary

from tests.support.faults import RestartableRedis
from tests.support.waiting import wait_until

SERVICE = "mymaster"
QUORUM = 2
DOWN_AFTER_MS = 1000
"""How long the primary must be silent before a sentinel calls it down (30 s by default)."""
FAILOVER_TIMEOUT_MS = 5000
READY_S = 60.0
"""Sentinels find each other through the primary's hello channel every 2 s: a few rounds."""


class Sentinel:
    """One `redis-server --sentinel`, with a config file of its own (a sentinel rewrites it)."""

    def __init__(self, root: Path, primary_port: int) -> None:
        self.root = root
        self.port = free_port()
        self.primary_port = primary_port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Sentinel:
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "sentinel.conf"
        conf.write_text(
            "\n".join(
                [
                    f"port {self.port}",
                    "bind 127.0.0.1",
                    f'dir "{self.root}"',
                    f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} {QUORUM}",
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [redis_server_binary(), str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=1,
            socket_connect_timeout=1,
            decode_responses=True,
        )

    def view(self) -> dict[str, Any] | None:
        """What this sentinel says of the primary (SENTINEL MASTER), None while it cannot say."""
        try:
            return dict(self.client().sentinel_master(SERVICE))
        except redis.RedisError:
            return None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class SentinelGroup:
    """A primary, a replica following it, and three sentinels watching them (quorum 2)."""

    def __init__(self, root: Path) -> None:
        self.primary = RestartableRedis(root / "primary")
        self.replica: RestartableRedis | None = None
        self.sentinels: list[Sentinel] = []
        self.root = root

    @property
    def url(self) -> str:
        """The Sentinel URL teamctl and its workers are given."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def start(self) -> SentinelGroup:
        self.primary.start()
        # No AOF on the replica: redis-server 6.2 may ignore SIGTERM while the AOF rewrite that
        # follows its sync runs.
        self.replica = RestartableRedis(
            self.root / "replica",
            args=("--replicaof", "127.0.0.1", str(self.primary.port), "--appendonly", "no"),
        ).start()
        replica = redis.Redis(port=self.replica.port, decode_responses=True)
        wait_until(
            lambda: replica.info("replication").get("master_link_status") == "up",
            READY_S,
            message="the replica to sync with the primary",
        )
        self.sentinels = [
            Sentinel(self.root / f"sentinel-{i}", self.primary.port).start() for i in range(3)
        ]
        wait_until(
            self._watching,
            READY_S,
            interval_s=0.1,
            message="3 sentinels to know the primary, its replica and each other",
        )
        return self

    def _watching(self) -> bool:
        views = [s.view() for s in self.sentinels]
        return all(
            v is not None and v.get("num-slaves") == 1 and v.get("num-other-sentinels") == 2
            for v in views
        )

    def primary_port(self) -> int | None:
        """The port the sentinels' majority names as the primary now."""
        ports = []
        for sentinel in self.sentinels:
            try:
                addr = sentinel.client().sentinel_get_master_addr_by_name(SERVICE)
            except redis.RedisError:
                continue
            if addr:
                ports.append(int(addr[1]))
        top = max(set(ports), key=ports.count, default=None)
        return top if top is not None and ports.count(top) >= QUORUM else None

    def kill_primary(self) -> None:
        """SIGKILL the primary (it stays down): the sentinels are to promote the replica."""
        self.primary.stop(crash=True)

    def wait_promoted(self, timeout_s: float = 60) -> None:
        assert self.replica is not None
        replica = redis.Redis(port=self.replica.port, decode_responses=True)
        wait_until(
            lambda: (
                self.primary_port() == self.replica.port  # type: ignore[union-attr]
                and replica.info("replication").get("role") == "master"
            ),
            timeout_s,
            interval_s=0.1,
            message="the sentinels to promote the replica",
        )

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        if self.replica is not None:
            self.replica.stop()
        self.primary.stop()

    def __enter__(self) -> SentinelGroup:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
