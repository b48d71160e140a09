"""`teamctl run`: its click command, with one flag per run option. A module of its own because
building those flags imports the team models (coordinator/cli/options.py), which no other verb
needs to parse its arguments; app.py loads it only when `run` runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from teamctl.coordinator.cli.app import (
    MODEL_DEFAULT,
    approve_plan_option,
    fail_cleanly,
    idle_exit_option,
    json_option,
    redis_url_option,
    run_workers_option,
)
from teamctl.coordinator.cli.options import run_option_flags
from teamctl.coordinator.local_workers.early_parent import EarlyParent
from teamctl.shared.redis.choice import is_embedded, resolve_redis_url

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings


@click.command()
@click.argument("objective")
@click.option(
    "--team",
    "team_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Team file (.toml, .yaml or .json).",
)
@click.option(
    "--model",
    default=None,
    help="Model for every role, over the team file's (default: the team file's "
    f"models, else {MODEL_DEFAULT}).",
)
@click.option(
    "--fallback-model",
    "fallback_models",
    multiple=True,
    help="A model every role tries when its own cannot answer (repeat for more, "
    "tried in order; replaces the team file's fallbacks).",
)
@click.option("--api-base", default=None, help="OpenAI-compatible endpoint ($TEAMCTL_API_BASE).")
@redis_url_option
@run_workers_option
@idle_exit_option
@click.option("--run-id", default=None, help="Id for the run (default: generated).")
@json_option
@approve_plan_option
@run_option_flags
@click.pass_obj
@fail_cleanly
def run(
    started_early: object,
    objective: str,
    team_path: Path | None,
    model: str | None,
    fallback_models: tuple[str, ...],
    api_base: str | None,
    redis_url: str | None,
    workers: int | None,
    idle_exit_s: int,
    run_id: str | None,
    as_json: bool,
    approve_plan: bool,
    settings: Settings,
    **option_flags: Any,
) -> None:
    """Plan OBJECTIVE, run the team, print the synthesized answer.

    Every run option of the team file is also a flag here; a flag overrides the file.
    Exit codes: 0 all tasks completed, 1 the run failed or some task did not complete,
    2 usage or configuration error.
    """
    from teamctl.coordinator.cli.commands import run_command

    code = run_command(
        objective=objective,
        team_path=team_path,
        model=model,
        fallback_models=fallback_models,
        api_base=api_base,
        redis_url=lambda: resolve_redis_url(redis_url, settings),
        workers=workers,
        run_id=run_id,
        as_json=as_json,
        approve_plan=approve_plan,
        option_flags=option_flags,
        settings=settings,
        embedded=is_embedded(redis_url, settings),
        idle_exit_s=idle_exit_s,
        # The workers' parent, if the command line asked for them (LazyGroup.main started it).
        early_parent=started_early if isinstance(started_early, EarlyParent) else None,
    )
    sys.exit(code)
