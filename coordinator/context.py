"""Everything one coordinator needs to drive a run, built once and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from teamctl.coordinator.dispatcher import Dispatcher
from teamctl.coordinator.hooks import HOOK_ERROR_TYPE, HookRunner
from teamctl.coordinator.progress import Reporter
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus, run_bus
from teamctl.shared.lease import Lease
from teamctl.shared.runstore import RunStore
from teamctl.shared.team import RunSpec


@dataclass
class RunContext:
    """The run's spec and its Redis-backed parts; the coordinator's only dependencies."""

    conn: redis.Redis
    spec: RunSpec
    store: RunStore
    board: TaskBoard
    bus: MessageBus
    dispatcher: Dispatcher
    hooks: HookRunner
    reporter: Reporter
    lease: Lease


def build_context(conn: redis.Redis, rq_conn: redis.Redis, spec: RunSpec, hooks: list[object],
                  reporter: Reporter) -> RunContext:
    """Wire the run's board, bus, dispatcher, hooks and lease around one connection."""
    bus = run_bus(conn, spec)
    lease = Lease(conn, spec.run_id, spec.options.lease_ttl_s)

    def report_hook_error(point: str, text: str) -> None:
        reporter.note(f"hook failed: {text}")
        bus.publish("system", "lead", HOOK_ERROR_TYPE, None, text)

    return RunContext(conn=conn, spec=spec,
                      store=RunStore(conn, spec.run_id, lease.owner, scripts=bus.scripts),
                      board=TaskBoard(conn, spec.run_id, scripts=bus.scripts), bus=bus,
                      dispatcher=Dispatcher(rq_conn, spec),
                      hooks=HookRunner(hooks, report_hook_error), reporter=reporter,
                      lease=lease)
