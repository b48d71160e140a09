"""The `teamctl` command line: parse, build dependencies, call one function, print, exit.

Nothing heavy is imported at module level: each verb imports what it uses when it runs, and the
verbs defined in other modules (LAZY_COMMANDS) are imported only when they run, so `--help` and
the short verbs start fast."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from teamctl.coordinator.advice import for_this_shell, keep_for_this_command
from teamctl.shared.redis.choice import (
    attach_redis_url,
    embedded_redis,
    is_embedded,
    resolve_redis_url,
)

if TYPE_CHECKING:
    from teamctl.shared.errors import ConfigError
    from teamctl.shared.settings import Settings

PATH_PARAMETERS = {
    "team_path": "--team {root} must name a file teamctl can read",
    "directory": "DIRECTORY {root} must be a directory teamctl can write",
}
"""The click parameters that are paths the user gave, and what to fix when one fails."""


def fail_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Build the Settings once (passed to the command as `settings`); known errors print one
    line to stderr and exit with their code, no traceback."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from teamctl.shared.errors import ConfigError, TeamError
        from teamctl.shared.redis.connection import redis_errors_as_infra
        from teamctl.shared.settings import load_settings
        from teamctl.shared.text import printable  # an error may quote what a model wrote

        advice = for_this_shell(kwargs.get("redis_url"))
        keep_for_this_command(advice)  # for the lines a verb prints itself (`spelled`)
        try:
            settings = load_settings()
        except ConfigError as exc:
            click.echo(f"teamctl: {advice.spell(printable(str(exc)))}", err=True)
            sys.exit(exc.exit_code)
        advice = for_this_shell(kwargs.get("redis_url"), settings)  # knows REDIS_URL now
        keep_for_this_command(advice)
        try:
            with redis_errors_as_infra():
                return fn(*args, settings=settings, **kwargs)
        except TeamError as exc:
            click.echo(f"teamctl: {advice.spell(printable(str(exc)))}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:
            error = user_path_error(exc, user_paths(kwargs, settings))
            if error is None:
                raise  # not a path the user chose: a bug or the machine, keep the traceback
            click.echo(f"teamctl: {error}", err=True)
            sys.exit(error.exit_code)
        except KeyboardInterrupt:  # a verb that started a run says what became of it, by its id
            click.echo("teamctl: interrupted", err=True)
            sys.exit(130)

    return wrapper


def user_paths(kwargs: dict[str, Any], settings: Settings) -> list[tuple[Path, str]]:
    """The paths this command was given (flags, arguments, the state directory), each with
    what the user should fix."""
    paths = [
        (Path(kwargs[name]), fix.format(root=kwargs[name]))
        for name, fix in PATH_PARAMETERS.items()
        if kwargs.get(name)
    ]
    root = settings.state_dir
    fix = (
        f"TEAMCTL_STATE_DIR={root} must be a directory teamctl can write"
        if settings.state_dir_from_env
        else f"the state directory {root} must be a directory teamctl can write (or set "
        "TEAMCTL_STATE_DIR to one)"
    )
    return [*paths, (root, fix)]


def user_path_error(exc: OSError, paths: list[tuple[Path, str]]) -> ConfigError | None:
    """An OS error on a path the user gave, or under it, as a one-line ConfigError; None for
    any other path. The deepest path given wins (--team may name a directory above the state
    directory)."""
    from teamctl.shared.errors import ConfigError

    deepest_first = sorted(
        paths, key=lambda item: len(Path(os.path.abspath(item[0])).parts), reverse=True
    )
    for name in (exc.filename, exc.filename2):
        if name is None or isinstance(name, int):
            continue
        failed = Path(os.path.abspath(os.fsdecode(name)))
        for root, fix in deepest_first:
            if failed.is_relative_to(os.path.abspath(root)):
                return ConfigError(f"cannot use {failed}: {exc.strerror or exc}; {fix}")
    return None


redis_url_option = click.option(
    "--redis-url", default=None, help="Redis to use (default: $REDIS_URL, else embedded)."
)
MODEL_DEFAULT = (
    "$TEAMCTL_MODEL, else the small default model of the first provider whose API "
    "key is set, else the built-in offline model"
)
"""Where a model comes from when no flag names one (shared/runs/run_config.py pick_model)."""


@dataclass(frozen=True)
class LazyCommand:
    """A verb defined in another module: where it lives, and the first paragraph of its help
    (what `teamctl --help` lists, so listing it imports nothing)."""

    module: str
    attribute: str
    help: str

    def load(self) -> click.Command:
        command: click.Command = getattr(importlib.import_module(self.module), self.attribute)
        return command


LAZY_COMMANDS = {
    "dashboard": LazyCommand(
        "teamctl.coordinator.cli.web_commands",
        "dashboard",
        "Serve a live web view of runs and teams (read-only unless "
        "--allow-control); needs `pip install 'teamctl[web]'`.",
    ),
    "lead": LazyCommand(
        "teamctl.coordinator.cli.lead_command",
        "lead_command",
        "Drive the team's lead agent: a line is a message, /help lists the slash commands.",
    ),
    "fork": LazyCommand(
        "teamctl.coordinator.cli.lineage_commands",
        "fork",
        "A new run from RUN_ID's records at a fork point, with changes: only what depends on "
        "the point is paid for again.",
    ),
    "replay": LazyCommand(
        "teamctl.coordinator.cli.lineage_commands",
        "replay",
        "Run RUN_ID again from its records, with no model call and no tool run.",
    ),
    "report": LazyCommand(
        "teamctl.coordinator.cli.web_commands",
        "report",
        "Write RUN_ID (default: the last run) as one self-contained HTML "
        "file to attach to a ticket: its plan as a graph, a timeline of every "
        "attempt by worker, the bus and each task's input, output and "
        "transcript.",
    ),
    "run": LazyCommand(
        "teamctl.coordinator.cli.run_verb",
        "run",
        "Plan OBJECTIVE, run the team, print the synthesized answer.",
    ),
    "team": LazyCommand(
        "teamctl.coordinator.cli.team_commands",
        "team_group",
        "Persistent teammates: spawn them, message them, watch them go idle.",
    ),
    "teams": LazyCommand(
        "teamctl.coordinator.cli.team_commands", "teams_command", "List the persistent teams."
    ),
}
"""The verbs whose modules are costly to import (pydantic models, RQ): loaded when they run."""


class LazyGroup(click.Group):
    """A click group that imports its LAZY_COMMANDS only to run them (or show their own help);
    its help lists them from the table, in click's own format."""

    def __init__(self, *args: Any, lazy: dict[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy
        self._listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = self.lazy.get(cmd_name)
        if lazy is None:
            return super().get_command(ctx, cmd_name)
        if self._listing:  # a stand-in with the same help: click shortens it as it would
            return click.Command(cmd_name, help=lazy.help)
        return lazy.load()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; at exit, the objects that exist then are frozen first, so the
        interpreter's last collection skips them: it walked every object the imports made
        (pydantic's models above all), ~40 ms of a 0.2 s verb, for memory the OS reclaims.

        Before anything else, a `run` that starts workers of its own starts their preloaded
        parent (early_parent.py): its preload is most of the wait for the run's first model
        request, and overlaps the CLI's own work from here on. The verb gets it as the
        context's object; one no verb took is stopped at exit."""
        given = args[0] if args else kwargs.get("args")
        argv = sys.argv[1:] if given is None else list(given)
        if argv[:1] == ["run"]:  # other verbs import none of the worker pool
            from teamctl.coordinator.local_workers.early_parent import start_early

            early = start_early(argv, os.environ)
            if early is not None:
                atexit.register(early.discard)
                kwargs.setdefault("obj", early)
        from teamctl.shared.process.log_lines import CLI_FORMAT, log_to_stderr

        atexit.unregister(gc.freeze)  # once per process, however often main runs (tests)
        atexit.register(gc.freeze)
        log_to_stderr(CLI_FORMAT)  # a log record a model wrote in cannot act on the terminal
        return super().main(*args, **kwargs)


@click.group(cls=LazyGroup, lazy=LAZY_COMMANDS)
@click.version_option(package_name="teamctl", prog_name="teamctl", message="%(prog)s %(version)s")
def main() -> None:
    """teamctl: run teams of LLM agents on Redis and RQ.

    Wherever a command takes a RUN_ID, `last` names the most recent run `teamctl runs` lists
    and `last~N` the Nth run before it.

    A listing (`runs`, `tasks`, `files`, `teams`, `team list`, ...) prints its rows under a
    header on a terminal; into a pipe or a file, one tab-separated line per row, no header."""


json_option = click.option("--json", "as_json", is_flag=True, help="Print the result JSON.")
run_workers_option = click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Start N workers for this run only (0: none). Default: on the embedded Redis, reuse or "
    "start the local pool (2 workers); on another Redis, start 2 for this run only when "
    "no worker listens on the run's queues.",
)
idle_exit_option = click.option(
    "--idle-exit",
    "idle_exit_s",
    type=click.IntRange(min=1),
    default=600,
    show_default=True,
    help="Seconds a pool worker this command starts stays without a job before it exits.",
)
force_option = click.option(
    "--force", is_flag=True, help="Overwrite the files this export writes if they exist."
)
approve_plan_option = click.option(
    "--approve-plan",
    is_flag=True,
    help="Approve the plan without asking (with require_plan_approval).",
)


@main.command()
@click.argument("run_id")
@redis_url_option
@run_workers_option
@idle_exit_option
@json_option
@approve_plan_option
@click.option(
    "--wait",
    is_flag=True,
    help="If the dead coordinator's lease has not expired yet, wait it out "
    "(at most its TTL) instead of exiting 2.",
)
@fail_cleanly
def resume(
    run_id: str,
    redis_url: str | None,
    workers: int | None,
    idle_exit_s: int,
    as_json: bool,
    approve_plan: bool,
    wait: bool,
    settings: Settings,
) -> None:
    """Take over RUN_ID after its coordinator died; completed tasks are never re-run."""
    from teamctl.coordinator.cli.commands import resume_command

    sys.exit(
        resume_command(
            redis_url=resolve_redis_url(redis_url, settings),
            run_id=run_id,
            workers=workers,
            as_json=as_json,
            approve_plan=approve_plan,
            settings=settings,
            embedded=is_embedded(redis_url, settings),
            idle_exit_s=idle_exit_s,
            wait=wait,
        )
    )


@main.command()
@click.argument("run_id")
@click.option(
    "--add-usd",
    metavar="USD",
    default=None,
    help="Dollars to add to the run's max_cost_usd (more than 0).",
)
@click.option(
    "--add-tokens",
    metavar="N",
    default=None,
    help="Tokens to add to the run's max_tokens (a whole number above 0).",
)
@redis_url_option
@fail_cleanly
def budget(
    run_id: str,
    add_usd: str | None,
    add_tokens: str | None,
    redis_url: str | None,
    settings: Settings,
) -> None:
    """Raise RUN_ID's budget (a run paused awaiting_budget resumes), or show it."""
    from teamctl.coordinator.cli.commands import budget_command

    budget_command(resolve_redis_url(redis_url, settings), run_id, add_tokens, add_usd)


@main.command()
@click.argument("run_id")
@redis_url_option
@click.option(
    "--wait",
    is_flag=True,
    help="Return once the run has ended, not when the stop is asked for (members "
    "finish the model or tool call in hand first).",
)
@fail_cleanly
def cancel(run_id: str, redis_url: str | None, wait: bool, settings: Settings) -> None:
    """Stop RUN_ID: no more dispatch, members stop, what never ran is blocked "cancelled"."""
    from teamctl.coordinator.cli.commands import cancel_command

    cancel_command(resolve_redis_url(redis_url, settings), run_id, wait=wait)


@main.command()
@click.argument("run_id")
@redis_url_option
@fail_cleanly
def approve(run_id: str, redis_url: str | None, settings: Settings) -> None:
    """Approve the plan RUN_ID is waiting on (require_plan_approval)."""
    from teamctl.coordinator.cli.commands import decide_command

    decide_command(resolve_redis_url(redis_url, settings), run_id, True, None)


@main.command()
@click.argument("run_id")
@redis_url_option
@click.option("--reason", default=None, help="Why, recorded on the run.")
@fail_cleanly
def reject(run_id: str, redis_url: str | None, reason: str | None, settings: Settings) -> None:
    """Reject the plan RUN_ID is waiting on; the run fails with "plan rejected"."""
    from teamctl.coordinator.cli.commands import decide_command

    decide_command(resolve_redis_url(redis_url, settings), run_id, False, reason)


@main.command()
@click.argument("run_id")
@click.argument("directory", type=click.Path(path_type=Path))  # a file there: one-line error
@redis_url_option
@force_option
@fail_cleanly
def export(
    run_id: str, directory: Path, redis_url: str | None, force: bool, settings: Settings
) -> None:
    """Write RUN_ID as AI4J files: DIRECTORY/state/<team>.json, DIRECTORY/mailbox/<team>.jsonl,
    and its workspace's files under DIRECTORY/workspace/."""
    from teamctl.coordinator.cli.commands import export_command

    export_command(attach_redis_url(redis_url, settings), run_id, directory, force)


@main.command()
@click.argument("run_id", required=False)
@redis_url_option
@click.option("--json", "as_json", is_flag=True, help="Print the result JSON.")
@fail_cleanly
def status(run_id: str | None, redis_url: str | None, as_json: bool, settings: Settings) -> None:
    """Show a run as a person reads it (default: the last run): status, rounds, time, tokens
    and cost, its error, its tasks (columns: task, member, status, attempts, time, cost, error;
    a model column before error once a fallback answered a call; past 100 tasks, the counts
    per status, then only the tasks in progress and the first 20 failed or blocked) and its
    answer. --json prints the result JSON instead, the object `run --json` prints, every task
    in it."""
    from teamctl.coordinator.cli.commands import status_command

    sys.exit(status_command(attach_redis_url(redis_url, settings), run_id, as_json))


@main.command()
@click.argument("run_a")
@click.argument("run_b")
@redis_url_option
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
@fail_cleanly
def diff(run_a: str, run_b: str, redis_url: str | None, as_json: bool, settings: Settings) -> None:
    """Compare two runs (either may still be running): the objective, the plan (tasks added,
    removed, changed), each shared task's output (the same, or a unified diff), and tokens and
    cost per task and in total, with B's difference from A."""
    from teamctl.coordinator.cli.diff_view import diff_command

    diff_command(attach_redis_url(redis_url, settings), run_a, run_b, as_json)


@main.command()
@click.argument("run_id", required=False)
@redis_url_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the task states as JSON (with --follow: one JSON object per line).",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Print the board, then every task state change until the run ends.",
)
@fail_cleanly
def tasks(
    run_id: str | None, redis_url: str | None, as_json: bool, follow: bool, settings: Settings
) -> None:
    """List a run's tasks (default: the last run's), in plan order (columns: task, status,
    member, attempts, detail); --follow then prints their changes as they happen, a line each:
    task, status, member, attempts=N."""
    url = attach_redis_url(redis_url, settings)
    if follow:
        from teamctl.coordinator.cli.live_view import follow_tasks_command

        follow_tasks_command(url, run_id, as_json)
        return
    from teamctl.coordinator.cli.commands import tasks_command

    tasks_command(url, run_id, as_json)


@main.command()
@click.argument("run_id", required=False)
@redis_url_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='One JSON object per line, with `kind` "task" or "message".',
)
@fail_cleanly
def events(run_id: str | None, redis_url: str | None, as_json: bool, settings: Settings) -> None:
    """Print a run's task state changes and messages in order, from its start until it ends
    (default: the last run's), a line each starting with its local time (HH:MM:SS, with the
    date before it when not today): `[task STATUS] TASK MEMBER attempts=N`, or a message as
    `messages` prints it."""
    from teamctl.coordinator.cli.live_view import events_command

    events_command(attach_redis_url(redis_url, settings), run_id, as_json)


@main.command()
@click.argument("run_id")
@click.argument("text")
@click.option("--to", "to", required=True, help="The member to message, or '*' for every member.")
@redis_url_option
@fail_cleanly
def send(run_id: str, text: str, to: str, redis_url: str | None, settings: Settings) -> None:
    """Send TEXT, as the lead, to a member of a live run (it reads it with team_read_messages,
    or in its next task's input); says `sent to MEMBER` (`messages --json` has its id)."""
    from teamctl.coordinator.cli.live_view import send_command

    send_command(resolve_redis_url(redis_url, settings), run_id, to, text)


@main.command()
@redis_url_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--limit",
    type=int,
    default=20,
    show_default=True,
    metavar="N",
    help="How many runs to list, newest first.",
)
@fail_cleanly
def runs(redis_url: str | None, as_json: bool, limit: int, settings: Settings) -> None:
    """List recent runs, newest first (columns: run, started, duration, status, cost,
    objective)."""
    from teamctl.coordinator.cli.runs_view import runs_command
    from teamctl.shared.errors import ConfigError

    if limit < 1:  # checked here, not by click: a usage error is one line
        raise ConfigError(f"--limit {limit}: give how many runs to list, 1 or more")
    runs_command(attach_redis_url(redis_url, settings), as_json, limit)


@main.group()
def redis() -> None:
    """The embedded Redis server."""


@redis.command("url")
@fail_cleanly
def redis_url_command(settings: Settings) -> None:
    """Print the embedded server's URL, password included (starting it if needed)."""
    click.echo(embedded_redis(settings).ensure())


@redis.command("start")
@fail_cleanly
def redis_start(settings: Settings) -> None:
    """Start the embedded server with the data it keeps on disk (commands that only read
    never start it)."""
    server = embedded_redis(settings)
    running = server.attached_url() is not None
    server.ensure()
    click.echo("already running" if running else "started")


@redis.command("cli", context_settings={"ignore_unknown_options": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@fail_cleanly
def redis_cli(args: tuple[str, ...], settings: Settings) -> None:
    """Run redis-cli on the embedded server: its socket, its password (kept out of `ps`)."""
    command, env = embedded_redis(settings).cli_command(list(args))
    os.execvpe(command[0], command, env)


@redis.command("stop")
@fail_cleanly
def redis_stop(settings: Settings) -> None:
    """Stop the embedded server and the local pool workers that serve it (its data stays on
    disk)."""
    from teamctl.coordinator.cli.worker_commands import stop_pool_command

    server = embedded_redis(settings)
    url = server.running_url()
    if url is not None:
        stop_pool_command(settings, url)
    result = server.stop()
    if result.stale_pid is not None:
        click.echo(
            f"not running (removed {server.pid_file}: pid {result.stale_pid} is not the "
            "redis-server teamctl started, and was not signalled)"
        )
    else:
        click.echo("stopped" if result.stopped else "not running")


@main.command()
@click.argument("run_id", required=False)
@click.argument("path", required=False)
@redis_url_option
@fail_cleanly
def files(run_id: str | None, path: str | None, redis_url: str | None, settings: Settings) -> None:
    """List a run's workspace files (columns: bytes, version, path; version `-` for a workspace
    on disk, which keeps none), or print the one at PATH (kept in Redis or on disk); without
    RUN_ID, the last run's (a PATH needs a RUN_ID before it: `files last PATH`)."""
    from teamctl.coordinator.cli.files_view import files_command

    files_command(attach_redis_url(redis_url, settings), run_id, path)


@main.command()
@click.argument("ids", nargs=-1, metavar="[RUN_ID] TASK_ID")
@redis_url_option
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message, whole.")
@fail_cleanly
def transcript(
    ids: tuple[str, ...], redis_url: str | None, as_json: bool, settings: Settings
) -> None:
    """Show what TASK_ID's member sent its model and got back: its tool calls and results.
    With TASK_ID alone, the task of the last run."""
    from teamctl.coordinator.cli.transcript_view import transcript_command
    from teamctl.shared.errors import ConfigError

    if len(ids) not in (1, 2):  # one argument is the task: a run alone names no transcript
        raise ConfigError(
            f"transcript takes TASK_ID (a task of the last run) or RUN_ID TASK_ID, "
            f"not {len(ids)} arguments"
        )
    run_id, task_id = (None, ids[0]) if len(ids) == 1 else ids
    transcript_command(attach_redis_url(redis_url, settings), run_id, task_id, as_json)


@main.command()
@click.argument("run_id", required=False)
@redis_url_option
@click.option("--member", default=None, help="Only messages visible to this member.")
@click.option("--type", "type_", default=None, help="Only messages of this type.")
@click.option("--follow", is_flag=True, help="Keep printing new messages until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@fail_cleanly
def messages(
    run_id: str | None,
    redis_url: str | None,
    member: str | None,
    type_: str | None,
    follow: bool,
    as_json: bool,
    settings: Settings,
) -> None:
    """Show a run's messages (default: the last run's), a line each: its local time (HH:MM:SS,
    with the date before it when not today), [type], (task), from -> to: content, the
    content's further lines indented under it."""
    from teamctl.coordinator.cli.messages_view import messages_command

    messages_command(
        attach_redis_url(redis_url, settings),
        run_id,
        member=member,
        type_=type_,
        follow=follow,
        as_json=as_json,
    )


@main.group(invoke_without_command=True)
@redis_url_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the workers as JSON, one object per worker (not per queue).",
)
@click.pass_context
@fail_cleanly
def workers(ctx: click.Context, redis_url: str | None, as_json: bool, settings: Settings) -> None:
    """List the workers on each queue (RQ's registry; columns: queue, worker, state, job, pool);
    `start` and `stop` manage the local pool."""
    if ctx.invoked_subcommand is not None:
        return
    from teamctl.coordinator.cli.worker_commands import list_workers_command

    list_workers_command(attach_redis_url(redis_url, settings), as_json, settings)


@main.command("worker")
@click.argument("queues", nargs=-1)
@redis_url_option
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@click.option(
    "--idle-exit",
    "idle_exit_s",
    type=click.IntRange(min=1),
    default=None,
    help="Exit after S seconds without a job (default: never).",
)
@fail_cleanly
def worker(
    queues: tuple[str, ...],
    redis_url: str | None,
    burst: bool,
    idle_exit_s: int | None,
    settings: Settings,
) -> None:
    """Run one preloaded worker in the foreground on QUEUES (default: members), as
    `RQ_CONFIG=teamctl.worker.settings rq worker QUEUES` does; start more to scale, on any
    host that reaches the same Redis."""
    from teamctl.coordinator.cli.worker_commands import foreground_worker_command
    from teamctl.shared.tracing import check_tracing

    check_tracing(settings)  # one line now, not a traceback from the worker's preload
    foreground_worker_command(
        resolve_redis_url(redis_url, settings), list(queues), burst, idle_exit_s
    )


@workers.command("start")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Pool workers to have running on these queues.",
)
@click.option(
    "--queue", "queues", multiple=True, help="Queue to serve (repeatable; default: members)."
)
@idle_exit_option
@redis_url_option
@fail_cleanly
def workers_start(
    count: int, queues: tuple[str, ...], idle_exit_s: int, redis_url: str | None, settings: Settings
) -> None:
    """Start local pool workers (up to N live on these queues) that outlive this command."""
    from teamctl.coordinator.cli.worker_commands import start_pool_command
    from teamctl.shared.tracing import check_tracing

    check_tracing(settings)  # one line now, not a log of every pool worker's failed preload
    start_pool_command(
        lambda: resolve_redis_url(redis_url, settings), list(queues), count, idle_exit_s, settings
    )


@workers.command("stop")
@fail_cleanly
def workers_stop(settings: Settings) -> None:
    """Stop the local pool's workers by their recorded pids (SIGTERM, then SIGKILL)."""
    from teamctl.coordinator.cli.worker_commands import stop_pool_command

    stop_pool_command(settings)
