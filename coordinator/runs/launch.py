"""Starting and driving a run, shared by `teamctl run`/`resume` and the Python API: check the
team, store the run, start the workers it needs, drive it to its end."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from teamctl.coordinator.local_workers.on_queues import Note, ensure_pool, retire_stale_pool
from teamctl.coordinator.local_workers.pool import DEFAULT_POOL_SIZE
from teamctl.coordinator.local_workers.worker_hints import StartingWorkers
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.private_files import private_dir
from teamctl.shared.process.worker_registry import listening_workers
from teamctl.shared.redis.connection import connect, set_outage

if TYPE_CHECKING:
    import redis
    from teamctl.coordinator.local_workers.early_parent import EarlyParent
    from teamctl.coordinator.runs.approval import ApprovalMode
    from teamctl.coordinator.runs.progress import Reporter
    from teamctl.shared.runs.output import RunResult
    from teamctl.shared.runs.run_config import ModelSource, RunSpec
    from teamctl.shared.settings import Settings
    from teamctl.shared.team_file import TeamFile


@dataclass(frozen=True)
class Launch:
    """A stored run, ready to be driven: its connection, spec and loaded hooks."""

    conn: redis.Redis
    redis_url: str
    spec: RunSpec
    hooks: list[object]
    model_source: ModelSource


def launch(
    team: TeamFile,
    objective: str,
    *,
    model: str | None,
    api_base: str | None,
    redis_url: Callable[[], str],
    run_id: str | None,
    settings: Settings,
    fallback_models: Sequence[str] = (),
) -> Launch:
    """Check everything that can be checked, then store the run. `redis_url` is called only
    once the input is valid: a config error starts no server and writes nothing."""
    from teamctl.coordinator.runs.hooks import load_hooks
    from teamctl.coordinator.runs.run import RunRequest, create_run
    from teamctl.shared.runs.run_config import choose_models
    from teamctl.shared.runs.run_refs import check_new_run_id
    from teamctl.shared.tracing import check_tracing
    from teamctl.shared.workspace.redis_files import choose_store

    if not objective.strip():
        raise ConfigError("the objective is empty: pass what the team should do")
    if run_id is not None:
        check_new_run_id(run_id)  # a bad --run-id starts no server
    team.check_python_tools()  # the team's Python tools import here, or exit 2 before any write
    # A team file's commands are absolute already; a team given in code resolves here.
    team = team.resolve_mcp_commands(Path.cwd())
    team.check_mcp_commands(settings.state_dir)
    hooks = load_hooks(team.hooks)  # a bad hook is a config error before anything is written
    check_tracing(settings)  # traces asked for without the extra: exit 2 before any write
    models, model_source = choose_models(team, model, api_base, settings, fallback_models)
    # Where a local workspace and the workers' logs go: one that will not do is a config
    # error before the run is stored, whichever store it uses.
    private_dir(settings.state_dir)
    url = redis_url()
    conn = connect(url)
    request = RunRequest(
        objective=objective,
        team=team,
        models=models,
        workspace_root=settings.state_dir / "workspaces",
        run_id=run_id,
        workspace_store=choose_store(settings.workspace_store, url),
    )
    return Launch(conn, url, create_run(conn, request), hooks, model_source)


@dataclass(frozen=True)
class WorkerPlan:
    """Which workers a run starts.

    A `count` given explicitly starts that many run-scoped workers. Without one, a run on the
    embedded defaults uses the warm pool, and a run on an external Redis starts run-scoped
    workers only when no worker listens on its queues.
    """

    count: int | None
    embedded: bool
    idle_exit_s: int
    early_parent: EarlyParent | None = None
    """The preloaded parent the CLI started for `count` workers as it began (early_parent.py)."""

    def run_scoped_count(
        self,
        redis_url: str,
        queues: list[str],
        settings: Settings,
        note: Note,
        starting: StartingWorkers | None = None,
        team_variables: Iterable[str] = (),
    ) -> int:
        """How many run-scoped workers to start.

        Pool workers it starts or replaces first are added to `starting`. A run with workers of
        its own still retires pool workers of another environment on its queues, since they
        would take its jobs.
        """
        if self.count is not None:
            if self.embedded and self.count:
                retire_stale_pool(redis_url, queues, settings, note, team_variables)
            return self.count
        if self.embedded:
            pool = ensure_pool(
                redis_url,
                queues,
                DEFAULT_POOL_SIZE,
                self.idle_exit_s,
                settings,
                note,
                team_variables,
            )
            if starting is not None:  # those started earlier may still be preloading too
                starting.workers.extend(pool.as_started())
            return 0
        return (
            0 if listening_workers(connect(redis_url, decode=False), queues) else DEFAULT_POOL_SIZE
        )


def run_to_end(
    conn: redis.Redis,
    redis_url: str,
    spec: RunSpec,
    hooks: list[object],
    *,
    workers: WorkerPlan,
    approval: ApprovalMode,
    reporter: Reporter,
    settings: Settings,
    interrupt: threading.Event | None = None,
) -> RunResult:
    """Start the workers the run needs, drive it to its end as its coordinator, stop them.
    Setting `interrupt` (from another thread) makes the coordinator stop at its next check with
    Interrupted, leaving the run as it is for the caller to cancel."""
    from teamctl.coordinator.local_workers.processes import LocalWorkers
    from teamctl.coordinator.runs.context import build_context
    from teamctl.coordinator.runs.run import Coordinator
    from teamctl.shared.tracing import COORDINATOR_SERVICE, tracing_from_settings

    outage_s = spec.options.redis_outage_s
    set_outage(conn, outage_s)
    starting = StartingWorkers()
    # Pool workers outlive this call: a library caller is warned, not only told at info.
    run_scoped = workers.run_scoped_count(
        redis_url, spec.queues, settings, reporter.warn, starting, spec.mcp_variables()
    )
    tracing = tracing_from_settings(settings, COORDINATOR_SERVICE)
    try:
        with LocalWorkers(
            redis_url,
            spec.queues,
            run_scoped,
            settings.state_dir / "logs",
            early=workers.early_parent,
            planner_first=not any(member.mcp_servers for member in spec.members),
        ) as local:
            starting.workers.extend(local.started())
            ctx = build_context(
                conn,
                connect(redis_url, decode=False, outage_s=outage_s),
                spec,
                hooks,
                reporter,
                starting,
                tracing,
            )
            if interrupt is not None:
                ctx.run.lease.interrupt = interrupt
            return Coordinator(ctx, approval).run()
    finally:
        tracing.close()
