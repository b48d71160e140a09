"""One run's Redis-backed parts, assembled in one place on one connection.

Jobs, the coordinator and the CLI verbs take a run's store, board, bus, budget and lease from a
RunHandle: all share one Scripts (registered once per connection) and one RunKeys, and each is
built on first use, the ones configured by the run's options only once the spec is known.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease, lease_owner
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.store import RunStore

if TYPE_CHECKING:  # imported by their properties: a verb that reads a run's board needs neither
    from teamctl.shared.budget import Budget
    from teamctl.shared.bus import MessageBus


class RunHandle:
    """A run's parts on `conn`. With a `lease_owner` the handle can take the run's lease and
    its store writes the run's status as that owner; without one it reads and signals only."""

    def __init__(
        self,
        conn: redis.Redis,
        run_id: str,
        *,
        spec: RunSpec | None = None,
        lease_owner: str | None = None,
    ) -> None:
        self.conn = conn
        self.keys = RunKeys(run_id)
        self.run_id = self.keys.run_id
        self.lease_owner = lease_owner
        if spec is not None:
            self.spec = spec  # fills the cached property: the spec is not read again

    @classmethod
    def driving(cls, conn: redis.Redis, spec: RunSpec) -> RunHandle:
        """The handle of a coordinator that will drive the run (it has an owner for the lease)."""
        return cls(conn, spec.run_id, spec=spec, lease_owner=lease_owner())

    @classmethod
    def existing(
        cls, conn: redis.Redis, run_id: str, *, lease_owner: str | None = None
    ) -> RunHandle:
        """The handle of a run that must exist: its spec is read now, and ConfigError naming
        `teamctl runs` says so if there is no such run."""
        run = cls(conn, run_id, lease_owner=lease_owner)
        run.spec = run.store.spec()
        return run

    @cached_property
    def scripts(self) -> Scripts:
        """The Lua scripts on this connection, shared by every part."""
        return Scripts(self.conn)

    @cached_property
    def spec(self) -> RunSpec:
        """The run's immutable spec, read once; ConfigError if there is no such run."""
        return self.store.spec()

    @cached_property
    def store(self) -> RunStore:
        """The run's spec and state, fenced as the handle's lease owner."""
        return RunStore(self.conn, self.keys, self.lease_owner, scripts=self.scripts)

    @cached_property
    def board(self) -> TaskBoard:
        """The run's tasks."""
        return TaskBoard(self.conn, self.keys, scripts=self.scripts)

    @cached_property
    def bus(self) -> MessageBus:
        """The run's bus, configured from its options: every publisher agrees on the cap."""
        from teamctl.shared.bus import MessageBus

        options = self.spec.options
        return MessageBus(
            self.conn,
            self.keys,
            enabled=options.enable_message_bus,
            max_message_bytes=options.max_message_bytes,
            bus_maxlen=options.bus_max_messages,
            scripts=self.scripts,
        )

    @cached_property
    def budget(self) -> Budget:
        """The run's token and cost limits, from its options."""
        from teamctl.shared.budget import Budget

        options = self.spec.options
        return Budget(
            self.conn,
            self.keys,
            max_tokens=options.max_tokens,
            max_cost_usd=options.max_cost_usd,
            scripts=self.scripts,
        )

    @cached_property
    def lease(self) -> Lease:
        """The coordinator lease, held as this handle's owner (a fresh one if it has none)."""
        return Lease(self.conn, self.keys, self.spec.options.lease_ttl_s, owner=self.lease_owner)
