"""`teamctl replay` and `teamctl fork`: a new run from an ended run's records, driven like `run`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from teamctl.coordinator.cli.app import (
    approve_plan_option,
    fail_cleanly,
    idle_exit_option,
    json_option,
    redis_url_option,
    run_workers_option,
)
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.choice import is_embedded, resolve_redis_url
from teamctl.shared.text import counted, quoted

if TYPE_CHECKING:
    from teamctl.coordinator.runs.fork import NewRun
    from teamctl.shared.runs.handle import RunHandle
    from teamctl.shared.settings import Settings

run_id_option = click.option(
    "--run-id", "new_run_id", default=None, help="Id for the new run (default: generated)."
)


@click.command("replay")
@click.argument("run_id")
@click.option(
    "--team",
    "team_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Replay against this team file instead of the recorded team (to check a change).",
)
@redis_url_option
@run_workers_option
@idle_exit_option
@run_id_option
@json_option
@fail_cleanly
def replay(
    run_id: str,
    team_path: Path | None,
    redis_url: str | None,
    workers: int | None,
    idle_exit_s: int,
    new_run_id: str | None,
    as_json: bool,
    settings: Settings,
) -> None:
    """Run RUN_ID again from its records, with no model call and no tool run.

    The plan, every member step and tool result, and the synthesis are the recorded ones, put
    through the current code. Where the current code takes another path, the replay stops and
    says where (`diverged at task t2, step 3: ...`). Exit codes as `run`."""
    from teamctl.coordinator.runs.fork import Source, replay_of
    from teamctl.shared.team_file import load_team_file

    team = load_team_file(team_path) if team_path is not None else None
    url = resolve_redis_url(redis_url, settings)
    source = _source(url, run_id)
    new = replay_of(Source.read(source), new_run_id, settings.state_dir / "workspaces", team)
    sys.exit(
        _start(
            url,
            source,
            new,
            workers,
            idle_exit_s,
            as_json,
            settings,
            embedded=is_embedded(redis_url, settings),
        )
    )


@click.command("fork")
@click.argument("run_id")
@click.option(
    "--at",
    "at",
    default="plan",
    show_default=True,
    help="Where the fork leaves RUN_ID: `plan` (plan again), a task (`t2`: its first step) "
    "or a task's step (`t2:3`: steps 1-2 replayed, then live).",
)
@click.option("--model", default=None, help="Model for every role of the fork.")
@click.option("--api-base", default=None, help="OpenAI-compatible endpoint for the fork's models.")
@click.option(
    "--member-model",
    "member_models",
    multiple=True,
    metavar="MEMBER=MODEL",
    help="One member's model in the fork (repeat for more).",
)
@click.option(
    "--prompt-file",
    "prompt_files",
    multiple=True,
    metavar="MEMBER=FILE",
    help="One member's description (its tasks' `Expertise:`) from FILE (repeat for more).",
)
@click.option("--objective", default=None, help="The fork's objective.")
@click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A run option of the fork (snake_case, as in the team file; repeat for more).",
)
@click.option(
    "--team",
    "team_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Team file for the fork (the forked task's member must still be in it).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what the fork would reuse and what it would pay for, and start nothing.",
)
@redis_url_option
@run_workers_option
@idle_exit_option
@run_id_option
@json_option
@approve_plan_option
@fail_cleanly
def fork(
    run_id: str,
    at: str,
    model: str | None,
    api_base: str | None,
    member_models: tuple[str, ...],
    prompt_files: tuple[str, ...],
    objective: str | None,
    options: tuple[str, ...],
    team_path: Path | None,
    dry_run: bool,
    redis_url: str | None,
    workers: int | None,
    idle_exit_s: int,
    new_run_id: str | None,
    as_json: bool,
    approve_plan: bool,
    settings: Settings,
) -> None:
    """A new run from RUN_ID's records at a fork point, with changes: only what depends on the
    point is paid for again.

    Tasks that do not depend on the point keep their outputs (no call), the forked task replays
    its steps before the point and goes on live, and what depends on it runs live, as does the
    synthesis. Exit codes as `run`."""
    from teamctl.coordinator.runs.fork import ForkChanges, ForkPoint, Source, fork_of
    from teamctl.shared.team_file import load_team_file

    point = ForkPoint.parse(at)  # a bad --at starts no server
    changes = ForkChanges(
        model=model,
        api_base=api_base,
        member_models=_pairs(member_models, "--member-model", "MEMBER=MODEL"),
        member_prompts={
            member: _read_prompt(path)
            for member, path in _pairs(prompt_files, "--prompt-file", "MEMBER=FILE").items()
        },
        objective=objective,
        options=_pairs(options, "--option", "KEY=VALUE"),
        team=load_team_file(team_path) if team_path is not None else None,
    )
    url = resolve_redis_url(redis_url, settings)
    source = _source(url, run_id)
    new = fork_of(
        Source.read(source), point, changes, new_run_id, settings.state_dir / "workspaces"
    )
    if dry_run:
        _print_dry_run(new)
        return
    sys.exit(
        _start(
            url,
            source,
            new,
            workers,
            idle_exit_s,
            as_json,
            settings,
            embedded=is_embedded(redis_url, settings),
            approve_plan=approve_plan,
        )
    )


def _source(redis_url: str, given: str) -> RunHandle:
    from teamctl.coordinator.cli.named_run import existing_run

    return existing_run(redis_url, given)


def _start(
    url: str,
    source: RunHandle,
    new: NewRun,
    workers: int | None,
    idle_exit_s: int,
    as_json: bool,
    settings: Settings,
    *,
    embedded: bool,
    approve_plan: bool = False,
) -> int:
    """Store the new run and drive it to its end as `teamctl run` does; the exit code."""
    from teamctl.coordinator.cli.commands import run_and_print
    from teamctl.coordinator.runs.fork import create
    from teamctl.coordinator.runs.hooks import load_hooks
    from teamctl.coordinator.runs.launch import WorkerPlan
    from teamctl.shared.redis.url_secrets import redacted

    spec = new.spec
    hooks = load_hooks(spec.hooks)  # a hook that no longer loads: exit 2 before anything is stored
    create(new, source)
    assert spec.lineage is not None
    click.echo(f"teamctl: run {spec.run_id} ({spec.lineage.text()}) on {redacted(url)}", err=True)
    for task_id, steps in new.cut.items():
        click.echo(f"teamctl: {_cut_line(new, task_id, steps)}", err=True)
    if not as_json and sys.stdout.isatty():
        click.echo(spec.run_id)
    return run_and_print(
        source.conn,
        url,
        spec,
        hooks,
        workers=WorkerPlan(workers, embedded, idle_exit_s),
        as_json=as_json,
        approve_plan=approve_plan,
        settings=settings,
    )


def _pairs(given: tuple[str, ...], flag: str, form: str) -> dict[str, str]:
    """`A=B` flags as a dict; one without `=` is a usage error naming the form."""
    pairs: dict[str, str] = {}
    for text in given:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {quoted(text)}: give {form}")
        pairs[key.strip()] = value
    return pairs


def _read_prompt(path: str) -> str:
    """A member's new description, from the file `--prompt-file` names."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--prompt-file: cannot read {path}: {exc}") from exc


def _print_dry_run(new: NewRun) -> None:
    """What the fork would reuse and pay for, a line each."""
    assert new.spec.lineage is not None
    lines = [
        f"{new.spec.lineage.text()} (dry run: nothing started)",
        f"plan: {'reused' if new.plan_reused else 'made again (paid)'}",
    ]
    for task_id in new.kept:
        lines.append(f"{task_id}: output kept (no call)")
    for task_id, steps in new.replayed.items():
        cut = new.cut.get(task_id)
        note = f"; {_cut_line(new, task_id, cut)}" if cut is not None else ""
        lines.append(f"{task_id}: {counted(steps, 'step')} replayed, then live (paid){note}")
    for task_id in new.live:
        lines.append(f"{task_id}: live (paid)")
    lines.append("synthesis: live (paid)")
    lines.append(
        f"model calls reused: {new.reused_calls}; "
        f"estimated cost: {new.estimate.tokens_text()}, {new.estimate.cost_text()} "
        "(what the paid part cost in the source run)"
    )
    for line in lines:
        click.echo(line)


def _cut_line(new: NewRun, task_id: str, steps: int) -> str:
    """What a journal cut at its cap means for the new run: a replay stops there, a fork pays."""
    assert new.spec.lineage is not None
    then = (
        "a replay stops there"
        if new.spec.lineage.kind == "replay"
        else "the steps after it are paid for again"
    )
    return (
        f"the journal of {task_id} was cut at journal_max_bytes after {counted(steps, 'step')}: "
        + then
    )
