"""`teamctl teams` and `teamctl team ...`: spawn, list, message and delete persistent teammates.

Every verb takes -t/--team (default $TEAMCTL_TEAM, else `default`) and --redis-url, reconciles
stalled teammates first (no process watches a team between verbs, so each verb looks), and exits 0
when done, 1 when the state refuses it (a teammate working or already shut down, a request already
resolved, `--wait` ran out), 2 for bad input (unknown teammate or request id, a bad name).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from pydantic import ValidationError
from teamctl.coordinator.advice import note, spelled
from teamctl.coordinator.cli.app import (
    MODEL_DEFAULT,
    fail_cleanly,
    force_option,
    redis_url_option,
)
from teamctl.coordinator.cli.messages_view import sent_line, sent_ms
from teamctl.coordinator.cli.table import print_listing
from teamctl.coordinator.teams.team_lines import (
    REQUEST_HEADER,
    TASK_HEADER,
    request_cells,
    task_cells,
)
from teamctl.shared.agent.model_usage import usage_by_model
from teamctl.shared.bus import LEAD
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.hosts import this_host
from teamctl.shared.redis.choice import attach_redis_url, is_embedded, resolve_redis_url
from teamctl.shared.redis.connection import connect
from teamctl.shared.settings import Settings
from teamctl.shared.task_records import TaskStatus, waiting_text
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_base import RequestRefused
from teamctl.shared.teams.team_store import TeamStore, list_teams
from teamctl.shared.teams.teammates import (
    DEFAULT_QUEUE,
    Teammate,
    TeammateStatus,
    load_teammate_python_tools,
    team_workspace,
)
from teamctl.shared.text import clock_text, counted, one_line
from teamctl.shared.tracing import CLI_SERVICE, Span, tracing_from_settings
from teamctl.shared.workspace.redis_files import choose_store

if TYPE_CHECKING:
    from teamctl.shared.agent.replies import Usage

TEAMS_HEADER = ("team", "teammates", "working", "tokens", "cost", "budget")
TEAMMATES_HEADER = ("name", "status", "role", "detail")
INBOX_HEADER = ("time", "from", "to", "type", "content")


def team_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "-t",
        "--team",
        "team",
        default=None,
        help="Team name (default: $TEAMCTL_TEAM, else 'default').",
    )(fn)


def with_store(
    fn: Callable[..., Any] | None = None,
    *,
    wakes: bool = False,
    reconciles: bool = False,
    reads: bool = False,
    queue_param: str | None = None,
) -> Callable[..., Any]:
    """Resolve --team and --redis-url into the team's store (passed as `store`); a verb that
    only `reads` attaches to the embedded Redis if it runs and starts nothing. A verb that
    `wakes` teammates first sees that workers of this environment serve their turns (on the
    embedded defaults the local pool is started, or renewed, as `run` does, before anything
    is enqueued; `queue_param` names its argument that adds a queue, spawn's --queue), then
    reconciles the team (mail to a teammate whose worker died reruns its turn), as one that
    `reconciles` (a listing shows who is working) does; elsewhere it says afterwards when no
    worker listens."""
    if fn is None:
        return lambda inner: with_store(
            inner, wakes=wakes, reconciles=reconciles, reads=reads, queue_param=queue_param
        )

    @redis_url_option
    @team_option
    @fail_cleanly
    @wraps(fn)
    def wrapper(
        *args: Any, team: str | None, redis_url: str | None, settings: Settings, **kwargs: Any
    ) -> Any:
        url = (attach_redis_url if reads else resolve_redis_url)(redis_url, settings)
        store = TeamStore(
            connect(url),
            team or settings.team,
            workspace_store=choose_store(settings.workspace_store, url),
        )
        embedded = is_embedded(redis_url, settings)
        if wakes and embedded:
            renew_for_verb(store, url, settings, [kwargs[queue_param]] if queue_param else [])
        if wakes or reconciles:
            store.scheduler.reconcile()
        result = fn(*args, store=store, settings=settings, **kwargs)
        if wakes and not embedded:
            say_unserved(store)
        return result

    return wrapper


def turn_queues(store: TeamStore) -> list[str]:
    """The queues of the team's live teammates' turns (the default one for a team without)."""
    teammates = [m for m in store.teammates() if m.status is not TeammateStatus.SHUTDOWN]
    return sorted({m.queue for m in teammates} or {DEFAULT_QUEUE})


def renew_for_verb(store: TeamStore, url: str, settings: Settings, more_queues: list[str]) -> None:
    """The local pool renewed on the team's turn queues and `more_queues` (spawn's --queue)
    before a verb wakes a teammate; none for a team that does not exist (the verb says so)."""
    from teamctl.shared.ids import check_queue

    for queue in more_queues:
        check_queue(queue)  # a bad name is exit 2 before any worker starts on it
    if store.exists() or more_queues:  # only spawn creates a team
        renew_pool(store, url, settings, sorted({*turn_queues(store), *more_queues}))


def renew_pool(store: TeamStore, url: str, settings: Settings, queues: list[str]) -> None:
    """The local pool on `queues`, started or renewed for this environment (the team's MCP
    variables count), its new workers registered: a turn enqueued next never runs on a worker
    started without this command's keys."""
    from teamctl.coordinator.local_workers.on_queues import ensure_pool
    from teamctl.coordinator.local_workers.pool import DEFAULT_IDLE_EXIT_S, DEFAULT_POOL_SIZE

    ensure_pool(
        url, queues, DEFAULT_POOL_SIZE, DEFAULT_IDLE_EXIT_S, settings, note, mcp_variables(store)
    )


def mcp_variables(store: TeamStore) -> set[str]:
    """The environment variables the team's MCP servers read (they set a worker's
    environment apart as the provider keys do)."""
    servers = store.meta().mcp_servers if store.exists() else []
    return {name for server in servers for name in server.variables()}


def say_unserved(store: TeamStore) -> None:
    """A hint per queue of the team's turns on which no worker listens."""
    from teamctl.coordinator.local_workers.worker_hints import no_worker_hint

    for queue in turn_queues(store):
        if not store.scheduler.workers_on(queue):
            note(no_worker_hint(queue, "its turn"))


@click.command("teams")
@redis_url_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_cleanly
def teams_command(redis_url: str | None, as_json: bool, settings: Settings) -> None:
    """List the persistent teams.

    Each row (columns: team, teammates, working, tokens, cost, budget) says how many teammates
    it has and how many work, the tokens and cost of its model calls with its limits, and
    budget `spent` once its budget is."""
    conn = connect(attach_redis_url(redis_url, settings))
    rows: list[dict[str, Any]] = []
    cells = []
    for name, created_ms in list_teams(conn):
        store = TeamStore(conn, name)
        teammates, options, usage = store.teammates(), store.options, store.usage()
        rows.append(
            {
                "team": name,
                "created_ms": created_ms,
                "teammates": len(teammates),
                "working": sum(m.status == "working" for m in teammates),
                "tokens": usage.tokens,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "cost_usd": usage.cost_usd,
                "unpriced": usage.unpriced,
                "max_tokens": options.max_tokens,
                "max_cost_usd": options.max_cost_usd,
                "budget_exceeded": usage.budget_exceeded,
                "usage_by_model": {
                    model: share.model_dump()
                    for model, share in usage_by_model(conn, store.keys).items()
                },
            }
        )
        cells.append(team_cells(rows[-1], usage))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    print_listing(TEAMS_HEADER, cells, empty="no teams yet")


def team_cells(row: dict[str, Any], usage: Usage) -> tuple[str, ...]:
    """One team of `teamctl teams`: teammates, working, tokens and cost (with their limits),
    and `spent` once its budget is."""
    tokens = usage.tokens_text() + (
        f" (max {row['max_tokens']:,})" if row["max_tokens"] is not None else ""
    )
    cost = usage.cost_text() + (
        f" (max ${row['max_cost_usd']:g})" if row["max_cost_usd"] is not None else ""
    )
    return (
        row["team"],
        str(row["teammates"]),
        str(row["working"]),
        tokens,
        cost,
        "spent" if row["budget_exceeded"] else "-",
    )


@click.group("team")
def team_group() -> None:
    """Persistent teammates: spawn them, message them, watch them go idle."""


@team_group.command("create")
@click.option(
    "--file",
    "team_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Team file whose [teammates] table sets the options.",
)
@click.option(
    "--max-tokens",
    type=int,
    default=None,
    help="Team-wide token budget: every teammate's and the lead's model calls "
    "(overrides the file's; at least 1).",
)
@click.option(
    "--max-cost-usd",
    type=float,
    default=None,
    help="Team-wide cost budget in USD (overrides the file's; more than 0, at most 1000000).",
)
@with_store
def create_command(
    team_file: Path | None,
    max_tokens: int | None,
    max_cost_usd: float | None,
    store: TeamStore,
    settings: Settings,
) -> None:
    """Create the team with its options and MCP servers (else the first spawn creates it with
    defaults and no MCP servers)."""
    from teamctl.shared.team_file import load_team_file

    team = load_team_file(team_file)
    team.check_mcp_commands(settings.state_dir)
    options = budget_options(team.teammates, max_tokens=max_tokens, max_cost_usd=max_cost_usd)
    if team.limits:  # the file's [limits] table applies to the team's calls too
        options = options.model_copy(update={"limits": {**team.limits, **options.limits}})
    if not store.create_new(options, team.mcp_servers):
        raise RequestRefused(
            f"team {store.team} exists; its options are kept (`teamctl team "
            "delete` it first to change them)"
        )
    click.echo(f"created team {store.team}")


def budget_options(options: TeamOptions, **flags: int | float | None) -> TeamOptions:
    """The team file's options with the budget flags given applied; a bad value names its
    flag (ConfigError, exit 2)."""
    given = {name: value for name, value in flags.items() if value is not None}
    if not given:
        return options
    try:
        return TeamOptions.model_validate({**options.model_dump(), **given})
    except ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-")
        raise ConfigError(f"{flag}: {first['msg']}") from None


@team_group.command("spawn")
@click.argument("name")
@click.option("--role", required=True, help="The teammate's role.")
@click.option("--prompt", required=True, help="What the teammate should do first.")
@click.option("--model", default=None, help=f"Its model (default: {MODEL_DEFAULT}).")
@click.option(
    "--fallback-model",
    "fallback_models",
    multiple=True,
    metavar="M",
    help="A model it tries when its own cannot answer (repeatable, in order; "
    "default: the team's [teammates] fallbacks).",
)
@click.option("--api-base", default=None, help="OpenAI-compatible endpoint ($TEAMCTL_API_BASE).")
@click.option("--queue", default=DEFAULT_QUEUE, show_default=True, help="RQ queue of its turns.")
@click.option(
    "--plan-mode",
    is_flag=True,
    help="It submits a plan for the lead's approval (`team review`) first.",
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="T",
    help="A workspace tool it may use (repeatable): read_file, write_file, edit_file, "
    "list_files, bash (bash only if listed); or a Python function as "
    "package.module:function.",
)
@click.option(
    "--mcp",
    "mcp",
    multiple=True,
    metavar="SERVER[:TOOL]",
    help="Tools of one of the team's MCP servers (repeatable): a server's name for "
    "all its tools, or server:tool for one (see `teamctl team create --file`).",
)
@with_store(wakes=True, queue_param="queue")
def spawn_command(
    name: str,
    role: str,
    prompt: str,
    model: str | None,
    fallback_models: tuple[str, ...],
    api_base: str | None,
    queue: str,
    plan_mode: bool,
    tools: tuple[str, ...],
    mcp: tuple[str, ...],
    store: TeamStore,
    settings: Settings,
) -> None:
    """Spawn NAME (or restart an idle one with a new role and prompt) and start its turn."""
    from teamctl.shared.runs.run_config import checked_api_base, pick_model

    chosen, _source = pick_model(model, None, settings)
    fallbacks = list(fallback_models) or (store.options.fallbacks if store.exists() else [])
    load_teammate_python_tools(tools)  # a Python tool imports here too, or exit 2 before the spawn
    if (tools or mcp) and store.exists():  # it records this host's directory as its workspace
        store.meta().check_host(store.team, this_host(), "command")
    teammate = store.spawn(
        name,
        role=role,
        prompt=prompt,
        model=chosen,
        api_base=checked_api_base(api_base, settings),
        queue=queue,
        plan_mode=plan_mode,
        tools=tools,
        mcp=mcp,
        workspace=team_workspace(settings.state_dir, store.team),
        fallbacks=[m for m in fallbacks if m != chosen],
    )
    click.echo(
        f"{teammate.name} is {teammate.status.value} in team {store.team} (model {teammate.model})"
    )


@team_group.command("fork")
@click.argument("name")
@click.option("--as", "new", required=True, metavar="NEW", help="The fork's name (a new one).")
@click.option(
    "--at-turn",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Fork NAME's memory as it stood after its turn N (default: its last ended turn).",
)
@click.option(
    "--model",
    default=None,
    help="The fork's model (default: NAME's): one NAME may call (its own, a fallback) or "
    "the team file's [teammates] grantable_models lists.",
)
@click.option("--role", default=None, help="The fork's role (default: NAME's).")
@click.option(
    "--prompt",
    default=None,
    help="A message from the lead that wakes the fork for its first turn (default: it "
    "waits idle for mail).",
)
@with_store(wakes=True)
def fork_command(
    name: str,
    new: str,
    at_turn: int | None,
    model: str | None,
    role: str | None,
    prompt: str | None,
    store: TeamStore,
    settings: Settings,
) -> None:
    """Add teammate NEW with NAME's memory as it stood after one of its turns and NAME's
    tools, MCP servers, workspace, queue and model (never more), idle: to try another model,
    role or message on the same history. Its turns count on from that turn."""
    store.meta()
    if prompt is not None and not prompt.strip():
        raise ConfigError("the prompt is empty; say what the fork should do, or leave --prompt out")
    teammate = store.forks.fork(name, new, at_turn=at_turn, model=model, role=role)
    origin = teammate.forked_from
    assert origin is not None  # a fork records where it came from
    click.echo(
        f"{teammate.name} is {teammate.status.value} in team {store.team}, forked from "
        f"{origin.teammate} after turn {origin.turn} (model {teammate.model})"
    )
    if prompt is None:
        return
    with lead_span(settings, "send_message", store) as span:
        message, woke = store.messages.send(LEAD, new, prompt, traceparent=span.traceparent)
    click.echo(sent_line(message.to or new, woke))
    say_if_spent(store)


@team_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_store(reconciles=True, reads=True)
def list_command(as_json: bool, store: TeamStore, settings: Settings) -> None:
    """List the team's teammates (columns: name, status, role, detail: what a working one's
    call waits for, why an idle one stopped, the fallback that answered its last call, whose
    fork it is)."""
    store.meta()
    teammates = store.teammates()
    if as_json:
        click.echo(json.dumps([m.model_dump(mode="json") for m in teammates], indent=2))
        return
    now = now_ms()
    rows = [
        (
            teammate.name,
            teammate.status.value,
            one_line(teammate.role, 40),
            teammate_detail(teammate, now),
        )
        for teammate in teammates
    ]
    print_listing(TEAMMATES_HEADER, rows, empty=f"no teammates in team {store.team} yet")


def teammate_detail(teammate: Teammate, now: int) -> str:
    """`team list`'s detail: what a working teammate's call waits for or why an idle one
    stopped, then the fallback that answered its last call and whose fork it is."""
    state = (
        waiting_text(teammate.waiting_model, teammate.waiting_until_ms, now, TaskStatus.IN_PROGRESS)
        if teammate.status is TeammateStatus.WORKING
        else one_line(teammate.idle_reason, 80)
    )
    return (state + fallback_note(teammate) + fork_note(teammate)).strip()


def fork_note(teammate: Teammate) -> str:
    """What `team list` adds for a fork: whose memory, after which turn."""
    origin = teammate.forked_from
    return f" (fork of {origin.teammate} after turn {origin.turn})" if origin else ""


def fallback_note(teammate: Teammate) -> str:
    """What `team list` adds when a fallback model answered the teammate's last call."""
    if not teammate.fallback_from:
        return ""
    return f" (last call answered by fallback {teammate.answered_model})"


@team_group.command("send")
@click.argument("name")
@click.argument("text")
@click.option(
    "--type",
    "type_",
    default=None,
    help="Message type (default peer.message; protocol types are refused).",
)
@with_store(wakes=True)
def send_command(
    name: str, text: str, type_: str | None, store: TeamStore, settings: Settings
) -> None:
    """Send TEXT from the lead to teammate NAME (waking it if idle); says `sent to NAME`, and
    `(woke it)` when it did (`team messages --json` has the message's id)."""
    store.meta()
    with lead_span(settings, "send_message", store) as span:
        message, woke = store.messages.send(
            LEAD, name, text, type_=type_, traceparent=span.traceparent
        )
    click.echo(sent_line(message.to or name, woke))
    say_if_spent(store)


@team_group.command("broadcast")
@click.argument("text")
@with_store(wakes=True)
def broadcast_command(text: str, store: TeamStore, settings: Settings) -> None:
    """Send TEXT from the lead to every teammate (waking the idle ones); says to how many, and
    how many it woke."""
    store.meta()
    with lead_span(settings, "send_message", store) as span:
        _, woke = store.messages.broadcast(LEAD, text, traceparent=span.traceparent)
    click.echo(f"sent to {counted(len(store.names()), 'teammate')}; woke {len(woke)}")
    say_if_spent(store)


@contextmanager
def lead_span(settings: Settings, name: str, store: TeamStore) -> Iterator[Span]:
    """A span of its own for what the person does as the lead (a message, a task), when the
    OTEL variables ask for traces: the turns it wakes link to it."""
    tracing = tracing_from_settings(settings, CLI_SERVICE)
    try:
        with tracing.start(
            name, attributes={"teamctl.team": store.team, "teamctl.member": LEAD}
        ) as span:
            yield span
    finally:
        tracing.close()


def say_if_spent(store: TeamStore) -> None:
    """Past the team's budget mail is delivered but wakes no one: say so on stderr."""
    reason = store.budget_exceeded()
    if reason:
        note(
            f"team {store.team}: {reason}; the message waits unread and wakes no one "
            "(`teamctl teams` shows the usage)"
        )


@team_group.command("inbox")
@click.argument("name", default=LEAD)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@with_store(reads=True)
def inbox_command(name: str, as_json: bool, store: TeamStore, settings: Settings) -> None:
    """Show NAME's unread messages (default: the lead's), oldest first (columns: time, from, to,
    type, content; the content cut to 200 characters); never marks them read."""
    store.meta()
    _, messages = store.messages.peek(name)
    if as_json:
        for message in messages:
            click.echo(message.model_dump_json(by_alias=True))
        return
    now = now_ms()
    print_listing(
        INBOX_HEADER,
        [
            (clock_text(sent_ms(m), now), m.from_, m.to or "*", m.type, one_line(m.content, 200))
            for m in messages
        ],
    )


@team_group.command("messages")
@click.option("--member", default=None, help="Only messages delivered to this teammate (or lead).")
@click.option("--type", "type_", default=None, help="Only messages of this type.")
@click.option("--follow", is_flag=True, help="Keep printing new messages (Ctrl-C to stop).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@with_store(reads=True)
def messages_command(
    member: str | None,
    type_: str | None,
    follow: bool,
    as_json: bool,
    store: TeamStore,
    settings: Settings,
) -> None:
    """Print the team's message bus, read or not, in order, a line each as `teamctl messages`
    prints it (its local time first); --follow tails it."""
    from teamctl.coordinator.cli.messages_view import team_messages

    team_messages(store, member=member, type_=type_, follow=follow, as_json=as_json)


@team_group.command("transcript")
@click.argument("name")
@click.option(
    "--turn",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Only turn N (a turn memory does not hold: exit 2, naming those it holds).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object: the turns with their entries, nothing cut.",
)
@with_store(reads=True)
def transcript_command(
    name: str, turn: int | None, as_json: bool, store: TeamStore, settings: Settings
) -> None:
    """Print NAME's conversation (`lead`: the lead's) turn by turn, as its memory holds it: a
    line per turn (its number, start time, how it ended), then under it a line per inbox
    message it was given, model reply, tool call with its arguments, and tool result, each cut
    to 300 characters with control characters removed; further lines indented."""
    from teamctl.coordinator.cli.team_transcript import print_transcript

    print_transcript(store, name, turn=turn, as_json=as_json)


@team_group.command("budget")
@click.option(
    "--add-usd",
    metavar="USD",
    default=None,
    help="Dollars to add to the team's max_cost_usd (more than 0).",
)
@click.option(
    "--add-tokens",
    metavar="N",
    default=None,
    help="Tokens to add to the team's max_tokens (a whole number above 0).",
)
@with_store(wakes=True)
def budget_command(
    add_usd: str | None, add_tokens: str | None, store: TeamStore, settings: Settings
) -> None:
    """Raise the team's budget (teammates it left idle take turns again), or show it."""
    from teamctl.coordinator.runs.run_control import parse_top_up

    tokens, usd = parse_top_up(add_tokens, add_usd)
    store.meta()
    if tokens or usd:
        state, woken = store.raise_budget(tokens, usd)
        click.echo(
            f"budget of team {store.team} raised"
            + ("" if state.exceeded else f"; woke {counted(len(woken), 'teammate')}")
        )
    else:
        state = store.budget.state()
    for line in state.lines():
        click.echo(line)


@team_group.command("shutdown")
@click.argument("name")
@click.option("--reason", default="", help="Why, for the teammate.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Wait up to S seconds for the answer (exit 1 if it does not come).",
)
@click.option(
    "--force", is_flag=True, help="Shut it down now: its turn is revoked, no answer asked."
)
@with_store(wakes=True)
def shutdown_command(
    name: str, reason: str, wait_s: float | None, force: bool, store: TeamStore, settings: Settings
) -> None:
    """Ask teammate NAME to shut down (it answers with respond_shutdown), or --force it."""
    store.meta()
    if force:
        store.requests.force_shutdown(name)
        click.echo(f"{name} is shut down (forced)")
        return
    record, woke = store.requests.request_shutdown(name, reason)
    click.echo(f"asked {name} to shut down: request {record.id}" + (" (woke it)" if woke else ""))
    if wait_s is None:
        return
    outcome = store.requests.wait(record.id, wait_s)
    if outcome is None:
        click.echo(
            spelled(f"no outcome for {record.id} within {wait_s:g}s; see `teamctl team requests`"),
            err=True,
        )
        sys.exit(1)
    click.echo(
        f"request {record.id} {outcome.status.value}"
        + (f": {one_line(outcome.response, 500)}" if outcome.response else "")
    )


@team_group.command("review")
@click.argument("request_id")
@click.option(
    "--approve/--reject",
    "approve",
    default=None,
    help="Approve the plan, or reject it (the teammate revises and resubmits).",
)
@click.option("--feedback", default="", help="What to keep or change, for the teammate.")
@with_store(wakes=True)
def review_command(
    request_id: str, approve: bool | None, feedback: str, store: TeamStore, settings: Settings
) -> None:
    """Approve or reject a teammate's plan request REQUEST_ID (waking the teammate)."""
    if approve is None:
        raise ConfigError("say --approve or --reject")
    store.meta()
    _, woke = store.requests.review_plan(request_id, approve, feedback)
    click.echo(
        f"{'approved' if approve else 'rejected'} {request_id}"
        + (" (woke the teammate)" if woke else "")
    )


@team_group.command("requests")
@click.argument("request_id", required=False)
@click.option("--pending", is_flag=True, help="Only the requests still waiting for an answer.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_store(reads=True)
def requests_command(
    request_id: str | None, pending: bool, as_json: bool, store: TeamStore, settings: Settings
) -> None:
    """List the team's protocol requests (shutdown, plan approval), oldest first, or one
    (columns: request, kind, from, to, status, detail: the response once answered, else the
    payload)."""
    store.meta()
    records = (
        [store.requests.get(request_id)] if request_id else store.requests.all(pending_only=pending)
    )
    if as_json:
        click.echo(
            json.dumps([r.model_dump(mode="json", by_alias=True) for r in records], indent=2)
        )
        return
    print_listing(REQUEST_HEADER, [request_cells(record) for record in records])


@team_group.group("task")
def task_group() -> None:
    """The team's task board: add tasks and list them; idle teammates that fit claim them."""


@task_group.command("add")
@click.argument("subject")
@click.option("--description", default="", help="What exactly is to be done.")
@click.option("--role", default="", help="Only a teammate of this role takes it.")
@click.option("--assignee", default="", help="Reserve it for this teammate.")
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="ID",
    help="A task that must complete first (repeatable).",
)
@with_store(wakes=True)
def task_add_command(
    subject: str,
    description: str,
    role: str,
    assignee: str,
    after: tuple[str, ...],
    store: TeamStore,
    settings: Settings,
) -> None:
    """Add a task (prints its id); a ready one goes to one idle teammate that fits."""
    from teamctl.shared.teams.tasks import TeamTasks

    store.meta()
    with lead_span(settings, "create_task", store) as span:
        task, woken = TeamTasks(store).add(
            subject,
            description=description,
            role=role,
            assignee=assignee,
            after=after,
            traceparent=span.traceparent,
        )
    click.echo(task.task_id)
    if woken:
        click.echo(f"{task.task_id} is {task.status.value}; woke {', '.join(woken)}", err=True)


@task_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@with_store(reads=True)
def task_list_command(as_json: bool, store: TeamStore, settings: Settings) -> None:
    """List the team's tasks (columns: task, status, owner, role, after, subject; owner is
    `for NAME` while the task is only assigned, after the tasks it waits on)."""
    from teamctl.shared.teams.tasks import TeamTasks

    store.meta()
    tasks = TeamTasks(store).snapshot()
    if as_json:
        click.echo(json.dumps([t.view() for t in tasks], indent=2))
        return
    print_listing(TASK_HEADER, [task_cells(t) for t in tasks])


@team_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Every message kept in each inbox, not only the unread ones.",
)
@force_option
@with_store(reads=True)
def export_command(
    directory: Path, everything: bool, force: bool, store: TeamStore, settings: Settings
) -> None:
    """Write DIR/config.json, DIR/inbox/<name>.jsonl (lead too) and DIR/requests/<id>.json."""
    from teamctl.coordinator.cli.team_export import export_team

    store.meta()
    for path in export_team(store, directory, everything=everything, force=force):
        click.echo(str(path))


@team_group.command("delete")
@click.option("--force", is_flag=True, help="Delete even while teammates are working.")
@with_store
def delete_command(force: bool, store: TeamStore, settings: Settings) -> None:
    """Delete the team: every teammate, message and memory."""
    removed = store.delete(force=force)
    click.echo(f"deleted team {store.team} ({counted(removed, 'key')})")
