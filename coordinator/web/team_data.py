"""A persistent team as its page shows it: the roster with each teammate's status and liveness
(a live turn lease, when it was last seen), unread mail per inbox, the pending protocol
requests, the team's tasks and its bus."""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.coordinator.web.run_page_data import MESSAGES_SHOWN
from teamctl.shared.budget import BudgetState
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import Envelope
from teamctl.shared.teams.tasks import TeamTask, TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import Teammate, TeamRequest


@dataclass(frozen=True)
class TeammateRow:
    teammate: Teammate
    turn_live: bool
    """Its turn lease is held: a worker is running its turn now."""
    unread: int


@dataclass(frozen=True)
class TeamView:
    team: str
    teammates: list[TeammateRow]
    lead_unread: int
    lead_inbox: list[Envelope]
    requests: list[TeamRequest]
    tasks: list[TeamTask]
    messages: list[Envelope]
    last_event_id: str
    last_message_id: str
    budget: BudgetState | None = None
    """The team's budget when it has one (the page offers to add to it)."""


LEAD_INBOX_SHOWN = 50


def load_team_view(store: TeamStore) -> TeamView:
    """Read the team (ConfigError if there is none) into a TeamView, writing nothing."""
    store.meta()
    # The streams first: a change made while the rest is read then still reaches the page.
    last = store.conn.xrevrange(store.keys.events, count=1)
    messages = store.bus.latest(MESSAGES_SHOWN)
    teammates = store.teammates()
    pipe = store.conn.pipeline(transaction=False)
    for teammate in teammates:
        pipe.exists(store.keys.turn(teammate.name))
    live = pipe.execute()
    rows = [
        TeammateRow(teammate, bool(turn), store.messages.unread_count(teammate.name))
        for teammate, turn in zip(teammates, live, strict=True)
    ]
    _, lead_inbox = store.messages.peek(LEAD, LEAD_INBOX_SHOWN)
    return TeamView(
        team=store.team,
        teammates=rows,
        lead_unread=store.messages.unread_count(LEAD),
        lead_inbox=lead_inbox,
        requests=store.requests.all(pending_only=True),
        tasks=TeamTasks(store).snapshot(),
        messages=messages,
        last_event_id=last[0][0] if last else "0-0",
        last_message_id=messages[-1].id if messages else "0-0",
        budget=store.budget.state() if store.budget.limited else None,
    )
