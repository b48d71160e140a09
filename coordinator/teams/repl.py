"""The lead's terminal loop: a line is a turn, `/...` a slash command (no model call), an empty
line a turn on the inbox alone; plus the script modes (`-m TEXT`, `--until-idle`).

While the lead runs, one watcher thread tails the team's bus: it announces each message that lands
in the lead's inbox on stderr, and reconciles stalled teammates every heartbeat_ttl_s/3 (a teammate
whose turn died is found while the lead waits, not at its next verb). It blocks on the bus (XREAD
BLOCK) between the two, never polls.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import click
import redis
from teamctl.coordinator.teams.lead import LeadAgent
from teamctl.coordinator.teams.team_lines import request_cells, task_cells
from teamctl.shared.bus import LEAD, delivered_to
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import Envelope
from teamctl.shared.errors import ModelError, TeamError
from teamctl.shared.redis.connection import block_ms
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_base import BudgetSpent
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import Teammate, TeammateStatus
from teamctl.shared.text import clock_text, flat, one_line, printable

HELP = """\
A line is a message to the lead agent; its unread inbox joins it. An empty line runs a turn on
the inbox alone. Slash commands (no model call):
  /team      teammates: name, role, status, stalled, task, unread messages
  /inbox     the lead's unread messages (shown, not consumed: the agent still gets them)
  /tasks     the team's task board
  /requests  shutdown and plan requests, oldest first
  /help      this text
  /quit      leave the lead (teammates keep running; `teamctl lead` continues later)"""
SETTLED = (TeammateStatus.IDLE, TeammateStatus.SHUTDOWN)
"""Statuses `--until-idle` waits for: nothing runs, and only a message wakes the teammate."""


def stream_end(store: TeamStore, key: str) -> str:
    """The id of the newest entry of a stream ('0-0' when empty): where a tail starts."""
    newest = store.conn.xrevrange(key, count=1)
    return newest[0][0] if newest else "0-0"


def bus_end(store: TeamStore) -> str:
    """Where a tail of the team's bus starts."""
    return stream_end(store, store.keys.bus)


def for_lead(message: Envelope) -> bool:
    """Whether the message lands in the lead's inbox (mail to lead, a teammate's broadcast)."""
    return delivered_to(message, LEAD)


def describe(message: Envelope) -> str:
    """One line for a person: when it was sent (as `teamctl messages` shows it, not its stream
    id), who, what type, request id, the content shortened."""
    request_id = getattr(message, "request_id", None)
    sent_ms = message.created_at or int(message.id.partition("-")[0] or 0)
    return (
        f"{clock_text(sent_ms, now_ms())}\t{flat(message.from_)} -> "
        f"{flat(message.to) or '*'}"
        f"\t{flat(message.type)}"
        + (f" ({flat(request_id)})" if request_id else "")
        + f"\t{one_line(message.content, 200)}"
    )


class Watcher:
    """A daemon thread: announces the lead's new mail on stderr and reconciles the team every
    `interval_s`, woken by the bus in between."""

    def __init__(self, store: TeamStore, interval_s: float) -> None:
        self.store = store
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="teamctl-lead-watch", daemon=True)
        self._after = "0-0"
        """The last bus message seen; the bus's end when the watch starts."""

    def __enter__(self) -> Watcher:
        self._after = bus_end(self.store)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        # It wakes at the next message or reconcile at the latest, and prints nothing after this.
        self._stop.set()

    def _run(self) -> None:
        next_reconcile = time.monotonic()
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_reconcile:
                    self.store.scheduler.reconcile()
                    next_reconcile = time.monotonic() + self.interval_s
                wait_ms = max(1, int((next_reconcile - time.monotonic()) * 1000))
                for message in self.store.bus.tail(self._after, wait_ms):
                    self._after = message.id
                    if for_lead(message):
                        self._say(f"[inbox] {describe(message)}")
            except (redis.RedisError, TeamError) as exc:  # an outage or a bad record: go on
                self._say(f"watching the team failed: {exc}")
                self._stop.wait(self.interval_s)

    def _say(self, line: str) -> None:
        if not self._stop.is_set():
            with suppress(ValueError):  # the stream was closed under us on the way out
                click.echo(f"teamctl lead: {printable(line)}", err=True)


class LeadRepl:
    """What a person or a script does with a running lead."""

    def __init__(self, agent: LeadAgent) -> None:
        self.agent = agent
        self.store = agent.store
        self.commands: dict[str, Callable[[], None]] = {
            "/team": self.show_team,
            "/inbox": self.show_inbox,
            "/tasks": self.show_tasks,
            "/requests": self.show_requests,
            "/help": lambda: click.echo(HELP),
        }

    # --- turns -------------------------------------------------------------------------------

    def turn(self, text: str) -> None:
        """One lead turn; its answer on stdout."""
        answer = self.agent.turn(text)
        if answer is None:
            click.echo("(nothing to do: no message and no unread mail)", err=True)
        else:
            click.echo(printable(answer))  # the lead model wrote it

    def loop(self, lines: Iterator[str]) -> None:
        """Read lines until /quit or the end of input; a model failure ends only its turn."""
        for raw in lines:
            line = raw.strip()
            if line == "/quit":
                return
            if line.startswith("/"):
                self.slash(line)
                continue
            try:
                self.turn(line)
            except ModelError as exc:
                click.echo(
                    f"teamctl: {flat(str(exc))}; the unread mail waits for the next turn", err=True
                )
            except BudgetSpent as exc:  # the slash commands still answer
                click.echo(f"teamctl: {flat(str(exc))}", err=True)
            except KeyboardInterrupt:
                # Its uncommitted step is dropped: its mail stays unread for the next turn.
                click.echo("(turn interrupted; /quit to leave)", err=True)

    def until_idle(self) -> None:
        """Block until every teammate is idle or shut down and the lead's inbox is handled,
        running a turn whenever unread mail is there. Woken by the team's events (every status
        change of a teammate or request) and by mail to the lead, never polling. BudgetSpent
        (exit 1) once the team's budget is spent and mail waits: no turn could handle it."""
        keys = self.store.keys
        watched = (keys.events, keys.inbox(LEAD))
        interval_ms = int(self.store.options.heartbeat_ttl_s * 1000 / 3)
        while True:
            # The positions come first, so nothing written after the reads below is missed.
            after = {key: stream_end(self.store, key) for key in watched}
            # Statuses before the inbox: turn_end.lua sets a teammate idle and mails its notice
            # in one step, so a notice of the last teammate to settle is seen below.
            settled = all(m.status in SETTLED for m in self.store.teammates())
            if self.store.messages.peek(LEAD, limit=1)[1]:
                self.turn("")
                continue
            if settled:
                return
            # A stalled teammate is reconciled by the watcher; its rerun or give-up is an event.
            self.store.bus.blocking_conn.xread(after, count=1, block=block_ms(interval_ms))

    # --- slash commands ----------------------------------------------------------------------

    def slash(self, line: str) -> None:
        """Run one slash command; a record that does not parse is reported, the REPL goes on."""
        command = self.commands.get(line.split()[0])
        if command is None:
            click.echo(f"unknown command {line.split()[0]}; /help lists them", err=True)
            return
        try:
            command()
        except TeamError as exc:
            click.echo(f"teamctl: {flat(str(exc))}", err=True)

    def show_team(self) -> None:
        tasks = {t.owner: t.task_id for t in TeamTasks(self.store).snapshot() if t.owner}
        teammates = self.store.teammates()
        if not teammates:
            click.echo("(no teammates yet)")
        for teammate in teammates:
            unread = self.store.messages.unread_count(teammate.name)
            click.echo(
                f"{teammate.name}\t{flat(teammate.role)}\t{teammate.status.value}"
                f"\t{'stalled' if self.stalled(teammate) else '-'}"
                f"\t{tasks.get(teammate.name, '-')}"
                f"\t{unread} unread"
                + (f"\t{one_line(teammate.idle_reason, 60)}" if teammate.idle_reason else "")
            )

    def stalled(self, teammate: Teammate) -> bool:
        """Working without a live turn, and either unseen for a lease TTL (the next reconcile
        reruns it) or already waiting for such a rerun (attempts > 0). A first turn waiting in
        its queue is not stalled."""
        if teammate.status is not TeammateStatus.WORKING:
            return False
        ttl_ms = int(self.store.options.heartbeat_ttl_s * 1000)
        return (
            teammate.attempts > 0 or now_ms() - teammate.last_seen_ms >= ttl_ms
        ) and not self.store.conn.exists(self.store.keys.turn(teammate.name))

    def show_inbox(self) -> None:
        messages = self.store.messages.peek(LEAD)[1]
        if not messages:
            click.echo("(no unread messages)")
        for message in messages:
            click.echo(describe(message))

    def show_tasks(self) -> None:
        """As `teamctl team task list`: id, status, owner (or assignee), role, after, subject."""
        tasks = TeamTasks(self.store).snapshot()
        if not tasks:
            click.echo("(no tasks)")
        for task in tasks:
            click.echo("\t".join(flat(cell) for cell in task_cells(task)))

    def show_requests(self) -> None:
        records = self.store.requests.all()
        if not records:
            click.echo("(no requests)")
        for record in records:
            click.echo("\t".join(flat(cell) for cell in request_cells(record)))


def show_step(step: list[dict[str, Any]]) -> None:
    """The tool calls of a committed step, one line each on stderr, with how they went."""
    for message in step:
        if message.get("role") != "tool":
            continue
        content = str(message.get("content") or "")
        outcome = (
            "error: " + one_line(_error_text(content), 160)
            if content.startswith("TOOL_ERROR")
            else "ok"
        )
        click.echo(f"teamctl lead: {flat(str(message.get('name')))}: {outcome}", err=True)


def _error_text(content: str) -> str:
    with suppress(ValueError, AttributeError):
        return str(json.loads(content.split(":", 1)[1])["error"])
    return content


def input_lines(prompt: str) -> Iterator[str]:
    """Lines from stdin; a terminal gets the prompt (and line editing), a pipe does not."""
    interactive = sys.stdin.isatty()
    if interactive:
        with suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
    while True:
        try:
            line = input(prompt) if interactive else sys.stdin.readline()
        except EOFError:
            return
        if not interactive and not line:
            return
        yield line
