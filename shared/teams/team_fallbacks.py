"""The fallback models of a persistent team's calls (its teammates' and its lead's): the same
FallbackCaller as a run's, with the team's options, its per-model usage and its events."""

from __future__ import annotations

from collections.abc import Sequence

from teamctl.shared.agent.fallbacks import (
    Cooldowns,
    FallbackCaller,
    FallbackNote,
    ModelLedger,
    WaitingClient,
)
from teamctl.shared.bus import LEAD
from teamctl.shared.teams.team_store import TeamStore

EVENTS_MAXLEN = 10_000
"""As the scripts cap the team's events stream (mate_event in shared/redis/lua/_lib/events.lua)."""
FALLBACK_STATUS = "fallback"
"""The status of a `mate` event saying a fallback model answered one of its calls."""


def team_caller(
    store: TeamStore, client: WaitingClient, who: str, fallbacks: Sequence[str]
) -> FallbackCaller:
    """`who`'s model calls (a teammate's name, or `lead`), then its `fallbacks`; a fallback's
    answer is a `mate` event (`teamctl team events`, the dashboard), not mail: the lead's inbox
    would pay tokens for every such notice."""
    options = store.options

    def fell_back(note: FallbackNote) -> None:
        store.conn.xadd(
            store.keys.events,
            {"mate": who, "status": FALLBACK_STATUS, "detail": note.text()},
            maxlen=EVENTS_MAXLEN,
            approximate=True,
        )

    # A teammate's record names the model that answered its last call (its `model` field is
    # the one it was given); the lead has no record of that kind.
    record = store.keys.teammate(who) if who != LEAD else None
    return FallbackCaller(
        client,
        fallbacks,
        options.fallback_after_s,
        Cooldowns(store.conn, options.fallback_cooldown_s),
        ModelLedger(store.conn, store.keys, record, "answered_model"),
        on_fallback=fell_back,
    )
