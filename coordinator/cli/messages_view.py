"""`teamctl messages` and `teamctl team messages`: print a run's or a team's bus and, with --follow,
keep printing until the run ends (a team never ends on its own: until it is deleted or Ctrl-C)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.coordinator.runs.run_follow import (
    START,
    BusTail,
    Tail,
    entry_ms,
    run_ended,
    tailed,
)
from teamctl.shared.bus import LEAD, MessageBus, delivered_to
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import Envelope
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import RESERVED_MEMBER_IDS
from teamctl.shared.text import clock_text, flat, indented, printable

if TYPE_CHECKING:
    from teamctl.shared.teams.team_store import TeamStore

Emit = Callable[[Envelope], None]
T = TypeVar("T")


def messages_command(
    redis_url: str,
    run_id: str | None,
    *,
    member: str | None,
    type_: str | None,
    follow: bool,
    as_json: bool,
) -> None:
    """Print the run's messages (those delivered to `member`, of type `type_`), then follow."""
    run = existing_run(redis_url, run_id)
    bus = run.bus
    recipient = None if member is None else _check_member(member, bus.member_ids)

    def emit(message: Envelope) -> None:
        if selected(message, recipient, type_):
            click.echo(formatted(message, as_json))

    last_id = print_bus(bus, emit)
    if follow:
        follow_bus(bus, last_id, emit, lambda: run_ended(run.store))


def print_bus(bus: MessageBus, emit: Emit) -> str:
    """Emit every message on the bus; returns the last id (START for none)."""
    last_id = START
    for message in bus.messages():
        emit(message)
        last_id = message.id
    return last_id


def follow(tail: Tail[T], emit: Callable[[T], None], has_ended: Callable[[], bool]) -> None:
    """Emit what `tail` yields until the run ends or Ctrl-C: the one tailing loop of
    `messages --follow`, `team messages --follow`, `tasks --follow` and `events`."""
    try:
        for item in tailed(tail, has_ended):
            emit(item)
    except KeyboardInterrupt:
        return


def follow_bus(bus: MessageBus, after_id: str, emit: Emit, has_ended: Callable[[], bool]) -> None:
    """Tail the bus until `has_ended` (then drain it) or Ctrl-C."""
    follow(BusTail(bus, after_id), emit, has_ended)


def _check_member(raw: str, member_ids: list[str]) -> str:
    """The member id (case and spaces ignored, nothing else rewritten), or ConfigError."""
    member = raw.strip().lower()
    if member not in member_ids and member not in RESERVED_MEMBER_IDS:
        raise ConfigError(
            f"--member {raw!r} is not in this run; use one of: {', '.join(member_ids)}, lead"
        )
    return member


def selected(message: Envelope, member: str | None, type_: str | None) -> bool:
    if type_ is not None and message.type != type_:
        return False
    return member is None or delivered_to(message, member)


def formatted(message: Envelope, as_json: bool, now: int | None = None) -> str:
    """One message as `messages`, `team messages` and `events` print it: when it was sent (local
    time), [type], (task), from -> to, then its content, whose further lines are indented under
    the first; with `as_json`, the message whole (its stream id included)."""
    if as_json:
        return message.model_dump_json(by_alias=True)
    task = f" ({flat(message.task_id)})" if message.task_id else ""
    to = flat(message.to) or "(everyone)"
    # Members write the message: nothing in it may act on the terminal, and only its content
    # may span lines.
    return indented(
        f"{clock_text(sent_ms(message), now or now_ms())} [{flat(message.type)}]"
        f"{task} {flat(message.from_)} -> {to}: {printable(message.content)}"
    )


def sent_ms(message: Envelope) -> int:
    """When the message was sent (epoch ms): its created_at, else its stream entry's time."""
    return message.created_at or entry_ms(message.id)


def sent_line(to: str, woke: bool = False) -> str:
    """What `send` and `team send` say once the message is on the bus (`--json` of `messages`
    has its id)."""
    return f"sent to {'every member' if to == '*' else flat(to)}" + (" (woke it)" if woke else "")


def team_messages(
    store: TeamStore, *, member: str | None, type_: str | None, follow: bool, as_json: bool
) -> None:
    """Print the team's messages (those delivered to `member`, of type `type_`), then follow."""
    store.meta()  # an unknown team is a ConfigError naming how to create it
    recipient = None
    if member is not None:
        recipient = member.strip().lower()
        if recipient != LEAD:
            store.get(recipient)  # an unknown teammate: ConfigError listing the teammates

    def emit(message: Envelope) -> None:
        if selected(message, recipient, type_):
            click.echo(formatted(message, as_json))

    last_id = print_bus(store.bus, emit)
    if follow:
        follow_bus(store.bus, last_id, emit, lambda: not store.exists())
