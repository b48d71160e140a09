"""What each CLI verb does, apart from parsing: build dependencies, call, format, exit code."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from teamctl.coordinator.advice import current as current_advice
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.connection import connect
from teamctl.shared.redis.url_secrets import redacted
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_config import ModelSource, RunSpec
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.settings import Settings
from teamctl.shared.task_records import TaskState, TaskStatus, waiting_text
from teamctl.shared.team_file import load_team_file
from teamctl.shared.text import counted, one_line, printable

if TYPE_CHECKING:
    import redis
    from teamctl.coordinator.local_workers.early_parent import EarlyParent
    from teamctl.coordinator.runs.approval import ApprovalMode
    from teamctl.coordinator.runs.launch import WorkerPlan
    from teamctl.coordinator.runs.progress import Reporter
    from teamctl.shared.board import TaskBoard
    from teamctl.shared.runs.output import RunResult

INTERRUPTED_EXIT_CODE = 130
"""128 + SIGINT, as shells report a command stopped by Ctrl-C."""


def exit_code_for(result: RunResult) -> int:
    """0 only when every task completed."""
    return 0 if result.status is RunStatus.COMPLETED else 1


def say_if_offline(source: ModelSource) -> None:
    """The offline model is a fallback the user may not expect: say so on stderr."""
    if source is ModelSource.OFFLINE:
        click.echo(
            "teamctl: no model configured and no provider key set; using the built-in "
            "offline model (set TEAMCTL_MODEL or --model for a real one)",
            err=True,
        )


def approval_mode(approve_plan: bool) -> ApprovalMode:
    """--approve-plan, else ask on an interactive terminal, else wait for approve/reject."""
    from teamctl.coordinator.runs.approval import ApprovalMode

    if approve_plan:
        return ApprovalMode.AUTO
    if sys.stdin.isatty() and sys.stderr.isatty():
        return ApprovalMode.PROMPT
    return ApprovalMode.WAIT


def run_command(
    *,
    objective: str,
    team_path: Path | None,
    model: str | None,
    api_base: str | None,
    redis_url: Callable[[], str],
    workers: int | None,
    run_id: str | None,
    as_json: bool,
    approve_plan: bool,
    option_flags: dict[str, Any],
    settings: Settings,
    embedded: bool = False,
    idle_exit_s: int | None = None,
    fallback_models: Sequence[str] = (),
    early_parent: EarlyParent | None = None,
) -> int:
    """`teamctl run`: create the run, drive it to its end, print the result; the exit code.
    `idle_exit_s` None: the pool's default.

    `redis_url` is called only once the input is valid: a config error starts no server."""
    from teamctl.coordinator.cli.options import merge_options
    from teamctl.coordinator.runs.launch import WorkerPlan, launch

    team = load_team_file(team_path)
    team = team.model_copy(update={"options": merge_options(team.options, option_flags)})
    started = launch(
        team,
        objective,
        model=model,
        api_base=api_base,
        redis_url=redis_url,
        run_id=run_id,
        settings=settings,
        fallback_models=fallback_models,
    )
    say_if_offline(started.model_source)
    click.echo(f"teamctl: run {started.spec.run_id} on {redacted(started.redis_url)}", err=True)
    # On a person's terminal the id to copy heads stdout; a pipe gets the answer alone, as
    # before, and --json's object carries the id.
    if not as_json and sys.stdout.isatty():
        click.echo(started.spec.run_id)
    plan = WorkerPlan(workers, embedded, _idle_exit_s(idle_exit_s), early_parent)
    return run_and_print(
        started.conn,
        started.redis_url,
        started.spec,
        started.hooks,
        workers=plan,
        as_json=as_json,
        approve_plan=approve_plan,
        settings=settings,
    )


def resume_command(
    *,
    redis_url: str,
    run_id: str,
    workers: int | None,
    as_json: bool,
    approve_plan: bool,
    settings: Settings,
    embedded: bool = False,
    idle_exit_s: int | None = None,
    wait: bool = False,
) -> int:
    """`teamctl resume`: take over a run whose coordinator's lease expired (with `wait`: once
    it expires); the exit code. `idle_exit_s` None: the pool's default."""
    from teamctl.coordinator.runs.hooks import load_hooks
    from teamctl.coordinator.runs.launch import WorkerPlan

    run = existing_run(redis_url, run_id)
    run_id, spec = run.run_id, run.spec
    if wait:
        _wait_out_lease(run)
    if run.store.state().finished:
        raise ConfigError(
            f"run {run_id} has already finished; `teamctl status {run_id}` shows its result"
        )
    run.lease.check_free()
    click.echo(f"teamctl: resuming run {run_id} on {redacted(redis_url)}", err=True)
    return run_and_print(
        run.conn,
        redis_url,
        spec,
        load_hooks(spec.hooks),
        workers=WorkerPlan(workers, embedded, _idle_exit_s(idle_exit_s)),
        as_json=as_json,
        approve_plan=approve_plan,
        settings=settings,
    )


def _idle_exit_s(given: int | None) -> int:
    """How long the workers a run starts wait idle before they exit: `given`, else the pool's
    default (read here: the pool's modules are for the verbs that start workers)."""
    from teamctl.coordinator.local_workers.pool import DEFAULT_IDLE_EXIT_S

    return DEFAULT_IDLE_EXIT_S if given is None else given


def _wait_out_lease(run: RunHandle) -> None:
    """Until the run's lease is free: a coordinator that died leaves it for at most its TTL
    (a live one renews it, and the wait goes on until that one ends or dies)."""
    from teamctl.coordinator.runs.run_follow import wait_for_end

    said = False
    while (ttl_ms := int(run.conn.pttl(run.keys.lease))) > 0 or ttl_ms == -1:
        if not said:
            click.echo(
                f"teamctl: run {run.run_id} is still leased to its coordinator; "
                f"waiting for the lease to expire (in {max(ttl_ms, 0) / 1000:.1f}s "
                "unless renewed)",
                err=True,
            )
            said = True
        if wait_for_end(run, time.monotonic() + max(ttl_ms, 100) / 1000):
            return  # it ended meanwhile: the caller says so


def run_and_print(
    conn: redis.Redis,
    redis_url: str,
    spec: RunSpec,
    hooks: list[object],
    *,
    workers: WorkerPlan,
    as_json: bool,
    approve_plan: bool,
    settings: Settings,
) -> int:
    """Drive the run to its end with the workers it needs, print the result; Ctrl-C cancels
    the run (as `teamctl cancel`) and exits 130 at once."""
    from teamctl.coordinator.cli.run_view import ending_lines, has_answer
    from teamctl.coordinator.runs.launch import run_to_end
    from teamctl.coordinator.runs.progress import Reporter
    from teamctl.coordinator.runs.result import result_json

    reporter = Reporter.for_stderr(current_advice())
    try:
        result = run_to_end(
            conn,
            redis_url,
            spec,
            hooks,
            workers=workers,
            approval=approval_mode(approve_plan),
            reporter=reporter,
            settings=settings,
        )
    except KeyboardInterrupt:
        return _cancel_interrupted(redis_url, spec, reporter)
    if as_json:
        click.echo(result_json(result))
    elif has_answer(result):
        click.echo(printable(result.output))
    for line in ending_lines(result, as_json):
        reporter.note(line)
    return exit_code_for(result)


def _cancel_interrupted(redis_url: str, spec: RunSpec, reporter: Reporter) -> int:
    """Ctrl-C: stop what this command started, the run with it, and say so by its id."""
    from teamctl.coordinator.runs.run_control import cancel_run
    from teamctl.shared.lease import lease_owner

    run_id = spec.run_id
    run = RunHandle(connect(redis_url), run_id, spec=spec, lease_owner=lease_owner())
    try:
        cancel_run(run)
    except ConfigError:  # it ended just before the Ctrl-C
        reporter.note(
            f"interrupted; run {run_id} had already ended (`teamctl status {run_id}` shows it)"
        )
    else:
        reporter.note(
            f"interrupted; run {run_id} cancelled: nothing more is dispatched and "
            f"its members stop at their next model call (`teamctl status {run_id}` "
            "shows what it did)"
        )
    return INTERRUPTED_EXIT_CODE


def status_command(redis_url: str, run_id: str | None, as_json: bool) -> int:
    """`teamctl status`: the run as a person reads it (answer, errors, tasks, cost), or the
    full result JSON rebuilt from Redis; the commands it suggests are spelled for this shell."""
    from teamctl.coordinator.cli.run_view import status_lines
    from teamctl.coordinator.runs.result import build_result, result_json, status_result

    run = existing_run(redis_url, run_id)
    if as_json:
        result = build_result(run, full=True)
        click.echo(result_json(result))
    else:
        result, summary = status_result(run)
        advice = current_advice()
        paused = _paused_hint(run) if result.status is RunStatus.AWAITING_BUDGET else None
        for line in status_lines(result, advice, paused, summary):
            click.echo(line)
        if not result.status.finished and not run.conn.exists(run.keys.lease):
            click.echo(
                advice.spell(
                    f"no coordinator is driving it: `teamctl resume {run.run_id}` continues it"
                )
            )
    return exit_code_for(result) if result.status.finished else 0


def _paused_hint(run: RunHandle) -> str:
    """The commands that resume a run paused by its budget."""
    from teamctl.coordinator.runs.run_control import resume_hint

    return resume_hint(run)


TASKS_HEADER = ("task", "status", "member", "attempts", "detail")
LISTING_FIELDS = (
    "task_id",
    "status",
    "claimed_by",
    "attempts",
    "replayed_steps",
    "model",
    "fallback_from",
    "waiting_model",
    "waiting_until_ms",
    "error",
)
"""The task fields `teamctl tasks` shows (its text, context and output are left unread)."""


def tasks_command(redis_url: str, run_id: str | None, as_json: bool) -> None:
    """`teamctl tasks`: the run's board in plan order."""
    from teamctl.coordinator.cli.table import print_listing

    run = existing_run(redis_url, run_id)
    if as_json:
        states = run.board.snapshot()
        click.echo(json.dumps([s.model_dump(mode="json") for s in states], indent=2))
        return
    hashes = run.board.snapshot_hashes(LISTING_FIELDS)
    now = now_ms()
    awaiting = run.store.status() is RunStatus.AWAITING_APPROVAL
    print_listing(
        TASKS_HEADER, [listing_row(listed_task(run.board, h), now, awaiting) for h in hashes]
    )


@dataclass(frozen=True, slots=True)
class ListedTask:
    """The fields of a task hash a `teamctl tasks` row shows, as TaskState reads them: read
    directly, since building thousands of models is most of what the listing costs."""

    task_id: str
    status: TaskStatus
    claimed_by: str | None
    attempts: int
    replayed_steps: int
    model: str | None
    fallback_from: str | None
    waiting_model: str | None
    waiting_until_ms: int
    error: str | None

    def waiting_text(self, now: int) -> str:
        """As TaskState.waiting_text: what the task's call waits for, or ""."""
        return waiting_text(self.waiting_model, self.waiting_until_ms, now, self.status)


def listed_task(board: TaskBoard, raw: dict[str, str]) -> ListedTask | TaskState:
    """A task hash's listed fields; a hash with a field this plain reading does not take (a
    corrupt record, which no board script writes) goes through the board's own TaskState
    parse instead, which reads it as it always did or says what is unreadable."""
    try:
        return ListedTask(
            task_id=raw["task_id"],
            status=TaskStatus(raw.get("status", TaskStatus.PENDING)),
            claimed_by=raw.get("claimed_by") or None,  # '' in Redis: absent
            attempts=_hash_count(raw.get("attempts")),
            replayed_steps=_hash_count(raw.get("replayed_steps")),
            model=raw.get("model") or None,
            fallback_from=raw.get("fallback_from") or None,
            waiting_model=raw.get("waiting_model") or None,
            waiting_until_ms=_hash_count(raw.get("waiting_until_ms")),
            error=raw.get("error") or None,
        )
    except (KeyError, ValueError):
        return board.parse(raw)


def _hash_count(value: str | None) -> int:
    """A count or a time in ms as a task hash holds it ('' or absent: 0); ValueError for any
    text but ASCII digits, which the model's laxer parse then reads."""
    if not value:
        return 0
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"not a plain count: {value!r}")
    return int(value)


def listing_row(task: ListedTask | TaskState, now: int, awaiting: bool) -> tuple[str, ...]:
    """A task's `teamctl tasks` row (TASKS_HEADER); `awaiting`: the plan awaits approval."""
    return (
        task.task_id,
        task.status.shown(awaiting),
        task.claimed_by or "-",
        str(task.attempts),
        _task_detail(task, now),
    )


def _task_detail(state: ListedTask | TaskState, now: int) -> str:
    """What else a person needs of a task: the steps it replayed, the model that answered when
    it was a fallback (the usual case stays short), and why its call waits or why it failed."""
    parts = []
    if state.replayed_steps:
        parts.append(f"replayed {counted(state.replayed_steps, 'step')}")
    if state.fallback_from:
        from teamctl.coordinator.cli.run_view import answered_text  # status's modules

        parts.append(f"model {answered_text(state.model, state.fallback_from)}")
    why = state.waiting_text(now) or one_line(state.error, 500)  # a provider's limit waits
    return "; ".join([*parts, why] if why else parts) or "-"


def decide_command(redis_url: str, run_id: str, approved: bool, reason: str | None) -> None:
    """`teamctl approve` / `teamctl reject`: record the plan decision once."""
    from teamctl.coordinator.runs.run_control import record_plan_decision

    run = existing_run(redis_url, run_id)
    record_plan_decision(run, approved, reason)
    click.echo(f"plan of run {run.run_id} {'approved' if approved else 'rejected'}")


def budget_command(
    redis_url: str, run_id: str, add_tokens: str | None, add_usd: str | None
) -> None:
    """`teamctl budget`: raise a live run's budget (a paused run resumes), or show it."""
    from teamctl.coordinator.runs.run_control import parse_top_up, raise_budget

    tokens, usd = parse_top_up(add_tokens, add_usd)
    run = existing_run(redis_url, run_id)
    if tokens or usd:
        state = raise_budget(run, tokens, usd)
        click.echo(
            f"budget of run {run.run_id} raised" + ("" if state.exceeded else "; it goes on")
        )
    else:
        state = run.budget.state()
    for line in state.lines():
        click.echo(line)


def cancel_command(redis_url: str, run_id: str, *, wait: bool = False) -> None:
    """Signal the run's coordinator and members; with no live coordinator, end the run here.
    With `wait`, return once the run has ended."""
    from teamctl.coordinator.runs.run_control import cancel_run
    from teamctl.coordinator.runs.run_follow import wait_for_end
    from teamctl.shared.lease import lease_owner

    run = existing_run(redis_url, run_id, lease_owner=lease_owner())
    if cancel_run(run):
        click.echo(f"run {run.run_id} cancelled")
        return
    run_id = run.run_id
    busy = run.board.counts().get(TaskStatus.IN_PROGRESS, 0)
    in_hand = (
        f"; its members stop after the model or tool call in hand ({counted(busy, 'task')}"
        " in progress)"
        if busy
        else ""
    )
    then = "" if wait else f" (`teamctl cancel {run_id} --wait` waits for the end)"
    click.echo(
        current_advice().spell(
            f"cancel requested: the coordinator of run {run_id} is stopping it{in_hand}{then}"
        )
    )
    if wait:
        wait_for_end(run, None)
        click.echo(f"run {run_id} {run.store.state().status}")


def export_command(redis_url: str, run_id: str, directory: Path, force: bool) -> None:
    """`teamctl export`: write the run as AI4J files and print their paths."""
    from teamctl.coordinator.cli.export import export_run

    run = existing_run(redis_url, run_id)
    for path in export_run(run, directory, force=force):
        click.echo(str(path))
