"""The team store and its scripts, driven by hand (no workers: turns go to a queue nobody
serves): turn leases, token-checked checkpoints and ends, wake-ups, reconcile's limit, the lead's
inbox on a team bus, and names checked before they reach a key."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue
from rq.job import Job
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.keys import RunKeys, TeamKeys
from teamctl.shared.roster import write_roster
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_base import TeammateBusy
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.teams import cli
from tests.support.waiting import wait_until

NOBODY = "nobody"


@pytest.fixture
def store(conn: redis.Redis) -> TeamStore:
    team = TeamStore(conn, f"t{uuid.uuid4().hex[:8]}")
    team.create(TeamOptions(heartbeat_ttl_s=0.2, max_teammates=3))
    return team


def spawn(store: TeamStore, name: str) -> None:
    store.spawn(name, role="r", prompt=f"{name}, start", model="m", api_base=None, queue=NOBODY)


def turns_queued(store: TeamStore) -> int:
    return Queue(NOBODY, connection=store.scheduler.rq_conn).count


def test_a_turn_holds_its_lease_and_only_its_token_writes(store: TeamStore) -> None:
    spawn(store, "alice")
    assert turns_queued(store) == 1
    verdict, token = store.turns.begin_turn("alice", "host:1")
    assert verdict == "ok" and store.get("alice").turn_token == token
    assert store.turns.begin_turn("alice", "host:2") == ("busy", "")
    assert not store.turns.checkpoint("alice", "999", "", [{"role": "user", "content": "x"}])
    assert store.turns.memory("alice") == [{"role": "user", "content": "alice, start"}]
    step = [{"role": "assistant", "content": "hi"}]
    assert store.turns.checkpoint("alice", token, "", step)
    assert store.turns.memory("alice")[-1] == step[0]
    assert store.turns.refresh_turn("alice", token) and not store.turns.refresh_turn("alice", "999")


def test_turn_end_goes_on_while_mail_is_unread_then_idles_with_one_notice(store: TeamStore) -> None:
    spawn(store, "alice")
    _, token = store.turns.begin_turn("alice", "host:1")
    message, woke = store.messages.send("lead", "alice", "more work")
    assert not woke  # working: its turn sees the mail before it ends
    assert store.turns.end_turn("alice", token, "done", "n") == "continue"
    last_id, unread = store.messages.peek("alice")
    assert [m.content for m in unread] == ["more work"] and last_id == message.id
    assert store.turns.checkpoint("alice", token, last_id, [{"role": "user", "content": "seen"}])
    assert store.messages.peek("alice") == ("", [])
    assert store.turns.end_turn("alice", token, "done", "alice is idle (done): ok") == "idle"
    assert store.turns.end_turn("alice", token, "done", "again") == "stale"
    teammate = store.get("alice")
    assert (teammate.status, teammate.idle_reason, teammate.turn_token) == (
        TeammateStatus.IDLE,
        "done",
        None,
    )
    assert [m.content for m in store.messages.notices(SystemType.TEAMMATE_IDLE)] == [
        "alice is idle (done): ok"
    ]
    assert [m.to for m in store.messages.peek("lead")[1]] == ["lead"]


def test_mail_wakes_an_idle_teammate_once_and_a_shut_down_one_never(
    store: TeamStore, conn: redis.Redis
) -> None:
    spawn(store, "alice")
    spawn(store, "bob")
    for name in ("alice", "bob"):
        _, token = store.turns.begin_turn(name, "host:1")
        assert store.turns.end_turn(name, token, "done", f"{name} idle") == "idle"
    queued = turns_queued(store)
    assert store.messages.send("lead", "alice", "wake up")[1] is True
    assert store.messages.send("lead", "alice", "and again")[1] is False
    assert turns_queued(store) == queued + 1
    conn.hset(store.keys.teammate("bob"), "status", TeammateStatus.SHUTDOWN)
    _, woke = store.messages.broadcast("lead", "everyone")
    assert woke == []  # alice is working already, bob is shut down
    assert [m.content for m in store.messages.peek("bob")[1]] == ["everyone"]  # the mail waits


def test_respawn_refused_while_working_and_roster_capped(store: TeamStore) -> None:
    spawn(store, "alice")
    with pytest.raises(TeammateBusy, match="alice is working; wait for idle or shut it down"):
        spawn(store, "alice")
    _, token = store.turns.begin_turn("alice", "host:1")
    store.messages.send("lead", "alice", "kept")
    store.turns.end_turn("alice", token, "error: x", "n", force=True, error="x")
    store.spawn("alice", role="new", prompt="again", model="m", api_base=None, queue=NOBODY)
    teammate = store.get("alice")
    assert (teammate.role, teammate.status, teammate.last_error) == (
        "new",
        TeammateStatus.WORKING,
        None,
    )
    assert store.turns.memory("alice") == [{"role": "user", "content": "again"}]
    assert [m.content for m in store.messages.peek("alice")[1]] == ["kept"]  # unread mail survives
    spawn(store, "bob")
    spawn(store, "carol")
    with pytest.raises(ConfigError, match="max_teammates"):
        spawn(store, "dave")
    assert store.names() == ["alice", "bob", "carol"]


def test_a_spawn_expires_only_requests_it_read_and_retries_on_a_newer_one(store: TeamStore) -> None:
    """team_spawn writes nothing while the requests it was given are not the teammate's set
    (one opened after the read), so no pending request of the old life survives a re-spawn."""
    spawn(store, "alice")
    first, _ = store.requests.request_shutdown("alice")
    _, token = store.turns.begin_turn("alice", "host:1")
    store.turns.end_turn("alice", token, "done", "n", force=True)
    second, _ = store.requests.request_shutdown("alice")  # wakes alice: end that turn too
    _, token = store.turns.begin_turn("alice", "host:1")
    store.turns.end_turn("alice", token, "done", "n", force=True)
    keys = store.keys
    before = store.conn.hgetall(keys.teammate("alice"))
    stale = store.scripts["team_spawn"](
        keys=[
            keys.teammate("alice"),
            keys.memory("alice"),
            keys.roster,
            keys.roster_ver,
            keys.events,
            keys.teammate_requests("alice"),
            keys.request(first.id),
        ],
        args=["alice", "r", "p", "m", "", NOBODY, 3, "{}", "", "", "", "", "", first.id],
    )
    assert stale == "retry" and store.conn.hgetall(keys.teammate("alice")) == before
    assert {store.requests.get(first.id).status, store.requests.get(second.id).status} == {
        "pending"
    }
    spawn(store, "alice")
    assert {store.requests.get(first.id).status, store.requests.get(second.id).status} == {
        "expired"
    }
    assert store.get("alice").epoch == 2


def lose_turn_job(store: TeamStore, name: str) -> None:
    """The teammate's queued turn job disappears (its queue was emptied, Redis lost it)."""
    job_id = store.get(name).job_id
    if job_id and Job.exists(job_id, connection=store.scheduler.rq_conn):
        Job.fetch(job_id, connection=store.scheduler.rq_conn).delete()


def test_reconcile_leaves_a_queued_turn_alone_however_long_it_waits(store: TeamStore) -> None:
    spawn(store, "alice")
    ttl_ms = store.options.heartbeat_ttl_s * 1000
    wait_until(
        lambda: now_ms() - store.get("alice").last_seen_ms > 2 * ttl_ms,
        10,
        message="alice unseen for two lease TTLs",
    )
    # No lease, unseen for long, but its job waits for a worker: that is no crash.
    assert store.scheduler.reconcile() == []
    assert store.get("alice").attempts == 0
    assert turns_queued(store) == 1


def test_reconcile_reruns_a_lost_turn_up_to_the_limit_then_tells_the_lead(store: TeamStore) -> None:
    spawn(store, "alice")
    queued = turns_queued(store)
    for attempt in (1, 2, 3):
        # No lease, no queued job, unseen for a TTL: stalled (the job was lost).
        lose_turn_job(store, "alice")
        assert wait_until(lambda: store.scheduler.reconcile(), 10, 0.05, "a rerun") == ["alice"]
        assert store.get("alice").attempts == attempt
    assert turns_queued(store) == queued  # the last rerun's job; the lost ones are gone

    def given_up() -> bool:
        lose_turn_job(store, "alice")
        store.scheduler.reconcile()
        return store.get("alice").status is TeammateStatus.IDLE

    wait_until(given_up, 10, 0.05, "reconcile to give up on alice")
    teammate = store.get("alice")
    assert teammate.last_error and "3 times" in teammate.last_error
    assert teammate.idle_reason and teammate.idle_reason.startswith("error: ")
    [notice] = store.messages.notices(SystemType.TEAMMATE_ERROR)
    assert notice.to == "lead" and notice.content.startswith("alice is idle after an error")
    assert store.scheduler.reconcile() == []


def test_workers_reconcile_a_team_at_most_once_per_lease_ttl(conn: redis.Redis) -> None:
    """After a turn a worker reconciles the team only when no worker did for a lease TTL, and
    that one still reruns a lost turn; a person's verb reconciles whenever it runs."""
    store = TeamStore(conn, f"t{uuid.uuid4().hex[:8]}")
    store.create(TeamOptions(heartbeat_ttl_s=5))
    spawn(store, "alice")
    lose_turn_job(store, "alice")
    stale_ms = now_ms() - 10_000  # unseen for two TTLs, without waiting for them
    conn.hset(store.keys.teammate("alice"), "last_seen_ms", stale_ms)
    assert store.scheduler.reconcile_at_most_every_ttl() == ["alice"]
    lose_turn_job(store, "alice")
    conn.hset(store.keys.teammate("alice"), "last_seen_ms", stale_ms)
    assert store.scheduler.reconcile_at_most_every_ttl() == []  # another worker's, within a TTL
    assert store.get("alice").attempts == 1
    assert 0 < conn.pttl(store.keys.reconciled) <= 5000
    assert store.scheduler.reconcile() == ["alice"]
    assert store.get("alice").attempts == 2


def test_a_live_turn_is_never_reconciled(store: TeamStore) -> None:
    spawn(store, "alice")
    _, token = store.turns.begin_turn("alice", "host:1")
    assert store.scheduler.reconcile() == []
    assert store.turns.refresh_turn("alice", token)
    assert store.scheduler.reconcile() == []


def test_lead_has_an_inbox_on_a_team_bus_only(conn: redis.Redis, store: TeamStore) -> None:
    spawn(store, "alice")
    spawn(store, "bob")
    store.messages.send("alice", "lead", "to the lead")
    store.messages.broadcast("alice", "to all")
    assert [m.content for m in store.messages.peek("lead")[1]] == ["to the lead", "to all"]
    assert [m.content for m in store.messages.peek("bob")[1]] == ["to all"]
    with pytest.raises(ConfigError):
        store.messages.send("lead", "lead", "to myself")
    run = MessageBus(conn, RunKeys("r1"))
    write_roster(conn, RunKeys("r1"), ["m1"])
    with pytest.raises(ConfigError, match="cannot receive peer messages"):
        run.send("m1", "lead", None, None, "no lead inbox in a run")


@pytest.mark.parametrize("name", ["../x", "a/b", "Alice", "lead", "system", "", "a\n"])
def test_bad_names_never_reach_a_key(conn: redis.Redis, store: TeamStore, name: str) -> None:
    before = set(conn.keys("*"))
    with pytest.raises(ConfigError):
        spawn(store, name)
    with pytest.raises(ConfigError):
        store.get(name)
    assert set(conn.keys("*")) == before
    if name not in ("lead", "system"):
        with pytest.raises(ConfigError):
            TeamKeys(name)


def test_memory_past_its_cap_loses_the_oldest_whole_exchanges(conn: redis.Redis) -> None:
    store = TeamStore(conn, f"t{uuid.uuid4().hex[:8]}")
    store.create(TeamOptions(memory_max_messages=4))
    spawn(store, "alice")
    _, token = store.turns.begin_turn("alice", "host:1")
    call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "list_teammates", "arguments": "{}"},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "c1", "name": "list_teammates", "content": "[]"}

    def user(text: str) -> dict[str, str]:
        return {"role": "user", "content": text}

    def said(text: str) -> dict[str, str]:
        return {"role": "assistant", "content": text}

    assert store.turns.checkpoint("alice", token, "", [call, result])
    assert store.turns.checkpoint("alice", token, "", [user("m1"), said("a1")])
    # Over the cap (5 > 4): the spawn prompt's exchange goes whole, with its tool call and result.
    assert store.turns.memory("alice") == [user("m1"), said("a1")]
    assert store.turns.checkpoint("alice", token, "", [call, result, said("a2")])
    # No user message to cut before within the last 4: nothing is cut mid-exchange.
    assert store.turns.memory("alice") == [user("m1"), said("a1"), call, result, said("a2")]
    assert store.turns.checkpoint("alice", token, "", [user("m2"), said("a3")])
    assert store.turns.memory("alice") == [user("m2"), said("a3")]


def test_trimming_a_team_bus_keeps_the_leads_unread_mail(
    conn: redis.Redis, store: TeamStore
) -> None:
    spawn(store, "alice")
    bus = MessageBus(conn, store.keys, bus_maxlen=5)
    for n in range(20):
        bus.send("alice", "lead", None, None, f"to the lead {n}")
    bus.trim()
    assert [m.content for m in store.messages.peek("lead")[1]] == [
        f"to the lead {n}" for n in range(20)
    ]
    assert len(bus.messages()) == 20


def test_export_writes_config_inboxes_and_requests(
    conn: redis.Redis, redis_url: str, store: TeamStore, tmp_path: Path
) -> None:
    spawn(store, "alice")
    spawn(store, "bob")
    store.messages.send("alice", "lead", "hi lead")
    hello, _ = store.messages.send("lead", "bob", "hi bob")
    request, _ = store.requests.request_shutdown("bob", "done for today")
    _, token = store.turns.begin_turn("bob", "host:1")
    assert store.turns.checkpoint("bob", token, hello.id, [{"role": "user", "content": "hi bob"}])

    def export(directory: Path, *extra: str) -> dict[str, list[dict[str, Any]]]:
        done = cli(
            "team", "export", str(directory), *extra, "-t", store.team, "--redis-url", redis_url
        )
        assert done.exit_code == 0, done.output
        return {
            p.stem: [json.loads(line) for line in p.read_text().splitlines()]
            for p in (directory / "inbox").iterdir()
        }

    unread = export(tmp_path / "unread")
    kept = export(tmp_path / "all", "--all")
    config = json.loads((tmp_path / "unread" / "config.json").read_text())
    assert config == {
        "team_name": store.team,
        "members": [
            {"name": "alice", "role": "r", "status": "working"},
            {"name": "bob", "role": "r", "status": "working"},
        ],
    }
    assert [(m["type"], m["from"], m["content"]) for m in unread["lead"]] == [
        ("peer.message", "alice", "hi lead")
    ]
    assert [(m["type"], m.get("request_id")) for m in unread["bob"]] == [
        ("shutdown_request", request.id)
    ]
    assert [m["content"] for m in kept["bob"]][0] == "hi bob" and len(kept["bob"]) == 2
    assert unread["alice"] == [] and isinstance(unread["lead"][0]["timestamp"], float)
    record = json.loads((tmp_path / "all" / "requests" / f"{request.id}.json").read_text())
    assert (record["kind"], record["status"], record["to"]) == ("shutdown", "pending", "bob")
    assert request.model_dump()["from"] == record["from"] == "lead"  # `from`, unasked
    again = cli("team", "export", str(tmp_path / "all"), "-t", store.team, "--redis-url", redis_url)
    assert (again.exit_code, again.stdout, again.stderr) == (
        2,
        "",
        f"teamctl: {tmp_path}/all/config.json exists; pass --force to overwrite the "
        "export's files\n",
    )
    assert export(tmp_path / "all", "--force") == unread  # unread mail only, this time
