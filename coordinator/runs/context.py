"""Everything one coordinator needs to drive a run, built once and passed explicitly."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from teamctl.coordinator.local_workers.worker_hints import NoWorkerHint, StartingWorkers
from teamctl.coordinator.runs.dispatcher import Dispatcher
from teamctl.coordinator.runs.hooks import HOOK_ERROR_TYPE, HookRunner
from teamctl.coordinator.runs.progress import Reporter
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.tracing import NO_TRACING, Tracing


@dataclass
class RunContext:
    """The run's Redis-backed parts (one handle) and the coordinator's own; its only
    dependencies."""

    run: RunHandle
    dispatcher: Dispatcher
    hooks: HookRunner
    reporter: Reporter
    starting: StartingWorkers = field(default_factory=StartingWorkers)
    """The workers this command started for the run (hints say they are starting)."""
    tracing: Tracing = NO_TRACING
    """This process's tracing: the run's spans start from it."""

    def no_worker_hint(self) -> NoWorkerHint:
        """A hint for a wait on the run's queues, aware of the workers started here."""
        return NoWorkerHint(self.dispatcher.rq_conn, self.starting, self.reporter.note, "the run")


def build_context(
    conn: redis.Redis,
    rq_conn: redis.Redis,
    spec: RunSpec,
    hooks: list[object],
    reporter: Reporter,
    starting: StartingWorkers | None = None,
    tracing: Tracing = NO_TRACING,
) -> RunContext:
    """Wire the run's handle, dispatcher and hooks around one connection."""
    run = RunHandle.driving(conn, spec)

    def report_hook_error(point: str, text: str) -> None:
        reporter.note(f"hook failed: {text}")
        run.bus.tell_lead(HOOK_ERROR_TYPE, None, text)

    return RunContext(
        run=run,
        dispatcher=Dispatcher(rq_conn, spec),
        hooks=HookRunner(hooks, report_hook_error),
        reporter=reporter,
        starting=starting or StartingWorkers(),
        tracing=tracing,
    )
