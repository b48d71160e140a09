"""A team's events stream carries teammates' and requests' changes beside the task events,
in order, so people and the lead can block on it instead of polling. Real Redis;
turns are played here through the store (their jobs queue where no worker listens)."""

from __future__ import annotations

import threading

import redis
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import RequestStatus

from tests.support.waiting import wait_until


def changes(store: TeamStore, after_id: str = "0-0") -> list[tuple[str, str, str, str]]:
    return [
        (e.kind, e.mate or e.request or e.task_id, e.status, e.detail)
        for e in store.messages.events(after_id)
    ]


def test_lifecycle_and_request_changes_land_on_events_in_order(
    conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create()
    store.spawn("alice", role="r", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    _, token = store.turns.begin_turn("alice", "test:1")
    assert store.turns.end_turn("alice", token, "done", "alice is idle") == "idle"
    store.messages.send("lead", "alice", "wake up")
    _, token = store.turns.begin_turn("alice", "test:2")
    request, woke = store.requests.request_shutdown("alice", "done for today")
    assert not woke  # she is working: the request waits for her next step
    store.requests.respond_shutdown("alice", request.id, True)
    assert store.turns.end_turn("alice", token, "done", "alice is idle") == "shutdown"

    assert changes(store) == [
        ("mate", "alice", "working", "spawned"),
        ("mate", "alice", "idle", "done"),
        ("mate", "alice", "working", "woken"),
        ("request", request.id, "pending", "shutdown alice"),
        ("request", request.id, "approved", "shutdown alice"),
        ("mate", "alice", "shutdown", request.id),
    ]


def test_an_unreviewed_plan_expires_on_events_when_next_read(conn: redis.Redis, team: str) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(plan_deadline_s=0.05))
    store.spawn(
        "bob",
        role="r",
        prompt="p",
        model="m",
        api_base=None,
        queue=f"nobody-{team}",
        plan_mode=True,
    )
    request = store.requests.submit_plan("bob", "1. think")
    last = store.messages.events()[-1].id
    # Reading the records applies the deadline (nothing polls for it).
    wait_until(
        lambda: store.requests.all()[0].status is RequestStatus.EXPIRED,
        5,
        message="the plan request to expire",
    )
    assert changes(store, last) == [("request", request.id, "expired", "plan_approval")]
    store.requests.all()
    assert changes(store, last) == [("request", request.id, "expired", "plan_approval")]


def test_a_watcher_blocked_on_events_wakes_on_a_spawn(conn: redis.Redis, team: str) -> None:
    store = TeamStore(conn, team)
    store.create()
    seen: list[str] = []
    watcher = threading.Thread(
        target=lambda: seen.extend(e.mate for e in store.messages.events(wait_ms=20_000))
    )
    watcher.start()  # a new team has no events yet: the watcher blocks until the spawn's
    store.spawn("carol", role="r", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    watcher.join(20)
    assert seen == ["carol"]
