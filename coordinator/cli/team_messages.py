"""`teamctl team messages`: print a persistent team's bus and, with --follow, keep printing until
the team is deleted or Ctrl-C (a team never ends on its own)."""

from __future__ import annotations

import click
from teamctl.coordinator.cli.messages_view import follow_bus, formatted, print_bus, selected
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import Envelope
from teamctl.shared.teams.team_store import TeamStore


def team_messages(store: TeamStore, *, member: str | None, type_: str | None, follow: bool,
                  as_json: bool) -> None:
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
