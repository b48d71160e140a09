"""`teamctl messages`: print (and follow) a run's bus."""

from __future__ import annotations

import click

from shared.bus import MessageBus
from shared.connection import connect
from shared.ids import check_run_id
from shared.models import Envelope
from shared.runstore import RunStore


def messages_command(redis_url: str, run_id: str, *, member: str | None, type_: str | None,
                     follow: bool, as_json: bool) -> None:
    conn = connect(redis_url)
    spec = RunStore(conn, check_run_id(run_id)).spec()
    bus = MessageBus(conn, run_id, [m.id for m in spec.members])
    for message in bus.messages():
        if _selected(message, member, type_):
            click.echo(_format(message, as_json))


def _selected(message: Envelope, member: str | None, type_: str | None) -> bool:
    if type_ is not None and message.type != type_:
        return False
    return member is None or message.to in (member, "*", None)


def _format(message: Envelope, as_json: bool) -> str:
    if as_json:
        return message.model_dump_json(by_alias=True)
    to = message.to or "*"
    return f"{message.id} [{message.type}] {message.from_} -> {to}: {message.content}"
