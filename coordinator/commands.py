"""What each CLI verb does, apart from parsing: build dependencies, call, format, exit code."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from shared.connection import connect
from shared.embedded_redis import state_dir
from shared.errors import ConfigError
from shared.ids import check_run_id
from shared.models import RunResult
from shared.team import ModelChoice, TeamFile, load_team_file


def exit_code_for(result: RunResult) -> int:
    return 0 if result.status == "completed" else 1


def resolve_models(team: TeamFile, model: str | None, api_base: str | None) -> ModelChoice:
    """Flag > team file > environment > provider default > offline model (said on stderr)."""
    from shared.llm import resolve_default_model

    explicit = model or team.model or os.environ.get("TEAMCTL_MODEL")
    default, offline = resolve_default_model(explicit, dict(os.environ))
    if offline and not explicit:
        click.echo("teamctl: no model configured and no provider key set; using the built-in "
                   "offline model (set TEAMCTL_MODEL or --model for a real one)", err=True)
    return ModelChoice(
        planner=model or team.planner.model or default,
        synthesizer=model or team.synthesizer.model or default,
        member_default=default,
        api_base=api_base or os.environ.get("TEAMCTL_API_BASE") or None)


def run_command(*, objective: str, team_path: Path | None, model: str | None,
                api_base: str | None, redis_url: str, workers: int, run_id: str | None,
                as_json: bool) -> int:
    from coordinator.run import Coordinator, RunRequest, create_run
    from coordinator.workers import LocalWorkers
    from shared.llm import ModelClient

    if not objective.strip():
        raise ConfigError("the objective is empty: pass what the team should do")
    team = load_team_file(team_path)
    models = resolve_models(team, model, api_base)
    conn = connect(redis_url)
    rq_conn = connect(redis_url, decode=False)
    request = RunRequest(objective=objective, team=team, models=models,
                         workspace_root=state_dir() / "workspaces", run_id=run_id)
    spec = create_run(conn, request)
    click.echo(f"teamctl: run {spec.run_id} on {redis_url}", err=True)
    queues = sorted({m.queue for m in spec.members})
    client = ModelClient(timeout_s=spec.options.model_timeout_s,
                         max_retries=spec.options.model_max_retries)
    with LocalWorkers(redis_url, queues, workers, state_dir() / "logs"):
        result = Coordinator(conn, rq_conn, spec, client).run()
    _print_result(result, as_json)
    click.echo(f"teamctl: run {spec.run_id} {result.status} in {result.rounds} rounds, "
               f"{len(result.member_results)} tasks ran", err=True)
    return exit_code_for(result)


def _print_result(result: RunResult, as_json: bool) -> None:
    from coordinator.result import result_json

    if as_json:
        click.echo(result_json(result))
    else:
        click.echo(result.output or "")


def status_command(redis_url: str, run_id: str, as_json: bool) -> int:
    from coordinator.result import build_result

    result = build_result(connect(redis_url), check_run_id(run_id))
    if as_json:
        _print_result(result, True)
    else:
        counts: dict[str, int] = {}
        for state in result.task_states:
            counts[state.status.value] = counts.get(state.status.value, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no tasks"
        click.echo(f"{run_id}: {result.status}; rounds {result.rounds}; {summary}")
    return exit_code_for(result) if result.status != "running" else 0


def tasks_command(redis_url: str, run_id: str, as_json: bool) -> None:
    from shared.board import TaskBoard
    from shared.runstore import RunStore

    conn = connect(redis_url)
    RunStore(conn, check_run_id(run_id)).spec()
    states = TaskBoard(conn, run_id).snapshot()
    if as_json:
        click.echo(json.dumps([s.model_dump(mode="json") for s in states], indent=2))
        return
    for s in states:
        click.echo(f"{s.task_id:24} {s.status.value:12} {s.claimed_by or '-':16} "
                   f"attempts={s.attempts} {s.error or ''}")


def runs_command(redis_url: str, as_json: bool) -> None:
    from shared.runstore import RunStore, list_runs

    conn = connect(redis_url)
    rows = []
    for run_id in list_runs(conn):
        store = RunStore(conn, run_id)
        state = store.state()
        rows.append({"run_id": run_id, "status": state.status, "rounds": state.rounds,
                     "objective": store.spec().objective})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['run_id']:28} {row['status']:10} {row['objective'][:60]}")
    if not rows:
        click.echo("no runs yet", err=sys.stderr.isatty())
