"""`teamctl lead`: drive the lead agent of a persistent team, from a terminal or a script.

It takes the team's lead lease first (a second lead exits 2 naming the holder), then starts the
local workers, then runs the REPL, one `-m` turn, and/or `--until-idle`. Quitting leaves the
teammates running; the lease is released on the way out (after a kill it expires), and the
next `teamctl lead` continues the conversation from Redis.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

import click
from teamctl.coordinator.advice import note, spelled
from teamctl.coordinator.cli.app import MODEL_DEFAULT, fail_cleanly, redis_url_option
from teamctl.coordinator.cli.team_commands import mcp_variables, renew_pool, team_option
from teamctl.shared.redis.choice import is_embedded, resolve_redis_url
from teamctl.shared.redis.connection import connect
from teamctl.shared.settings import Settings
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.text import counted

if TYPE_CHECKING:
    from teamctl.coordinator.teams.repl import LeadRepl


@click.command("lead")
@click.option(
    "--model",
    default=None,
    help=f"The lead's model, and its teammates' default (default: {MODEL_DEFAULT}).",
)
@click.option(
    "--fallback-model",
    "fallback_models",
    multiple=True,
    metavar="M",
    help="A model the lead tries when its own cannot answer (repeatable, in order; "
    "default: the team's [teammates] fallbacks); its teammates' default too.",
)
@click.option("--api-base", default=None, help="OpenAI-compatible endpoint ($TEAMCTL_API_BASE).")
@click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Start N local workers for this lead only, stopped when it exits. Default "
    "(and 0) on the embedded Redis: reuse or start the local pool, as the team "
    "verbs do. Default on another Redis: start 2 when no worker listens on the "
    "team's queues; 0 there starts none.",
)
@click.option(
    "--new",
    "start_over",
    is_flag=True,
    help="Forget the lead's conversation and start over (unread mail stays unread).",
)
@click.option(
    "-m",
    "--message",
    default=None,
    help="Run one turn on TEXT without a terminal, then exit (or --until-idle).",
)
@click.option(
    "--until-idle",
    is_flag=True,
    help="Then wait until every teammate is idle or shut down and the lead's inbox "
    "is handled, running a turn on each new mail.",
)
@team_option
@redis_url_option
@fail_cleanly
def lead_command(
    model: str | None,
    fallback_models: tuple[str, ...],
    api_base: str | None,
    workers: int | None,
    start_over: bool,
    message: str | None,
    until_idle: bool,
    team: str | None,
    redis_url: str | None,
    settings: Settings,
) -> None:
    """Drive the team's lead agent: a line is a message, /help lists the slash commands."""
    from teamctl.coordinator.cli.commands import say_if_offline
    from teamctl.coordinator.teams.lead import LeadAgent
    from teamctl.coordinator.teams.repl import LeadRepl, Watcher, show_step
    from teamctl.shared.agent.llm import LitellmClient
    from teamctl.shared.lease import LeadLease
    from teamctl.shared.process.hosts import this_host
    from teamctl.shared.providers.limits import worker_limits
    from teamctl.shared.runs.run_config import (
        checked_api_base,
        checked_fallback_flags,
        pick_model,
    )
    from teamctl.shared.teams.teammates import team_workspace
    from teamctl.shared.tracing import CLI_SERVICE, tracing_from_settings
    from teamctl.shared.workspace.redis_files import choose_store

    tracing = tracing_from_settings(settings, CLI_SERVICE)  # a config error before any write
    url = resolve_redis_url(redis_url, settings)
    store = TeamStore(
        connect(url),
        team or settings.team,
        workspace_store=choose_store(settings.workspace_store, url),
    )
    meta = store.create()
    meta.check_host(store.team, this_host(), "lead")  # its tools and spawns use the directory
    options = meta.options
    chosen, source = pick_model(model, None, settings)
    base = checked_api_base(api_base, settings)
    fallbacks = checked_fallback_flags(fallback_models)
    fallbacks = [m for m in (options.fallbacks if fallbacks is None else fallbacks) if m != chosen]
    lease = LeadLease(store.conn, store.keys, options.heartbeat_ttl_s)
    with ExitStack() as stack:
        stack.callback(tracing.close)  # last: after the lead's last turn
        stack.enter_context(lease)  # before the workers: a second lead is refused at once
        say_if_offline(source)
        start_workers(
            stack, store, url, workers, settings, embedded=is_embedded(redis_url, settings)
        )
        client = LitellmClient(
            provider_keys=settings.provider_keys,
            timeout_s=options.model_timeout_s,
            max_retries=options.model_max_retries,
            keys_in="this `teamctl lead` (it makes the lead's model calls)",
            limits=worker_limits(store.conn, options.limits, settings),
        )
        agent = LeadAgent(
            store,
            lease,
            client,
            chosen,
            base,
            team_workspace(settings.state_dir, store.team),
            on_step=show_step,
            tracing=tracing,
            fallbacks=fallbacks,
        )
        stack.callback(agent.close)
        if start_over:
            agent.memory.start_over()
        stack.enter_context(Watcher(store, options.heartbeat_ttl_s / 3))
        try:
            converse(LeadRepl(agent), message, until_idle, f"team {store.team} (model {chosen})")
        except KeyboardInterrupt:
            click.echo(
                spelled(
                    "teamctl: interrupted; the teammates keep running, and `teamctl "
                    "lead` continues the conversation"
                ),
                err=True,
            )
            sys.exit(130)


def start_workers(
    stack: ExitStack,
    store: TeamStore,
    url: str,
    workers: int | None,
    settings: Settings,
    *,
    embedded: bool = False,
) -> None:
    """By default (or 0) the local pool on the embedded defaults (as the `team` verbs have
    it), and on another Redis 2 workers of the lead's own when none listens; `workers` of its
    own on every queue the team uses (stopped with `stack`); with 0 on another Redis, a warning
    for each queue no worker listens on (turns there would wait). On the embedded defaults,
    pool workers of another environment on those queues are gone before the lead's first turn:
    a turn never runs without the keys this command has."""
    from teamctl.coordinator.local_workers.pool import DEFAULT_POOL_SIZE
    from teamctl.shared.teams.teammates import DEFAULT_QUEUE

    queues = sorted({DEFAULT_QUEUE, *(m.queue for m in store.teammates())})
    if embedded and not workers:
        renew_pool(store, url, settings, queues)
        return
    if workers is None:
        served = all(store.scheduler.workers_on(queue) for queue in queues)
        workers = 0 if served else DEFAULT_POOL_SIZE
    if embedded:
        from teamctl.coordinator.local_workers.on_queues import retire_stale_pool

        retire_stale_pool(url, queues, settings, note, mcp_variables(store))
    if workers:
        own_workers(stack, url, queues, workers, settings)
        return
    from teamctl.coordinator.local_workers.worker_hints import no_worker_hint

    for queue in queues:
        if not store.scheduler.workers_on(queue):
            note(no_worker_hint(queue, "each turn there"))


def own_workers(
    stack: ExitStack, url: str, queues: list[str], count: int, settings: Settings
) -> None:
    """`count` workers of the lead's own on `queues`, said when they start and when they stop
    (a warm stop: each finishes the turn in hand, which may take a while)."""
    from teamctl.coordinator.local_workers.processes import LocalWorkers

    stack.enter_context(LocalWorkers(url, queues, count, settings.state_dir / "logs"))
    workers = counted(count, "local worker")
    note(f"started {workers} for this lead on {', '.join(queues)}; they stop when it exits")
    stack.callback(note, f"stopping this lead's {workers} (each finishes the turn in hand)")


def converse(repl: LeadRepl, message: str | None, until_idle: bool, what: str) -> None:
    """One `-m` turn and/or `--until-idle`; without either, the REPL on stdin."""
    from teamctl.coordinator.teams.repl import input_lines

    if message is not None:
        repl.turn(message)
    if until_idle:
        repl.until_idle()
    if message is None and not until_idle:
        click.echo(f"teamctl lead of {what}; /help for commands", err=True)
        repl.loop(input_lines("lead> "))
