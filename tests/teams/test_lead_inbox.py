"""The lead's inbox retention, driven by hand (turns begun and ended by the test, no workers):
without `teamctl lead`, the oldest unread notices fold into one summary and the bus stays within
bus_max_messages; peer and protocol messages to the lead are all kept, a teammate's message to
a lead whose inbox is full of them is refused; a lead reading meanwhile gets each message once
and never a folded one; no fold or compaction script blocks Redis for 5 ms."""

from __future__ import annotations

import json
import re
import threading
import uuid
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.teams.lead import LeadMemory
from teamctl.shared.bus import LEAD
from teamctl.shared.envelopes import Envelope, ProtocolType, SystemType
from teamctl.shared.teams.inbox import InboxBatch, unread_batch
from teamctl.shared.teams.lead_inbox import LeadMailboxFull
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.worker.teams.teammate_tools import TeammateTools

from tests.support.slowlog import (
    NOISE_CEILING_MS,
    first_within_the_rule,
    script_shas,
    slow_scripts_ms,
    slowlog_at_the_rule,
)
from tests.support.teams import cli

NOBODY = "nobody"
BUS_CAP = 40
INBOX_CAP = 10
SUMMARY = re.compile(
    r"(\d+) older notices were folded into this one to keep your unread mail "
    r"within lead_inbox_max_messages \(10\): teammate\.idle (\d+)\. "
    r"Teammates: (.*)\. See list_tasks, get_task and list_teammates for where "
    r"things stand now\."
)


def team(conn: redis.Redis, **options: int) -> TeamStore:
    store = TeamStore(conn, f"t{uuid.uuid4().hex[:8]}")
    store.create(TeamOptions(max_teammates=3, **options))
    for name in ("alice", "bob"):
        store.spawn(name, role="r", prompt=f"{name}, start", model="m", api_base=None, queue=NOBODY)
    return store


def turn(store: TeamStore, name: str, label: str) -> None:
    """One turn of `name`, woken by the lead's message: it reads the message and goes idle, so
    the lead gets one teammate.idle notice naming `label`."""
    store.messages.send(LEAD, name, f"work on {label}")
    verdict, token = store.turns.begin_turn(name, "test:1")
    assert verdict == "ok"
    last_id, mail = store.messages.peek(name)
    assert [m.content for m in mail][-1] == f"work on {label}"
    assert store.turns.checkpoint(name, token, last_id, [{"role": "user", "content": "read"}])
    assert store.turns.end_turn(name, token, "done", f"{name} is idle (done): {label}") == "idle"


def idle_label(message: Envelope) -> str:
    return message.content.rsplit(": ", 1)[1]


def kept_kinds(messages: list[Envelope]) -> list[tuple[str, str]]:
    return [
        (m.type, m.content)
        for m in messages
        if m.type != SystemType.TEAMMATE_IDLE and m.type != SystemType.INBOX_SUMMARY
    ]


def test_without_a_lead_notices_fold_and_the_bus_stays_within_its_cap(conn: redis.Redis) -> None:
    store = team(conn, bus_max_messages=BUS_CAP, lead_inbox_max_messages=INBOX_CAP)
    store.messages.send("alice", LEAD, "peer 0: the schema is ready")
    request, _ = store.requests.request_shutdown("bob", "end of day")
    _, token = store.turns.begin_turn("bob", "test:1")
    store.requests.respond_shutdown("bob", request.id, False, "still busy")
    last_id, _ = store.messages.peek("bob")
    assert store.turns.checkpoint("bob", token, last_id, [{"role": "user", "content": "read"}])
    assert store.turns.end_turn("bob", token, "done", "bob is idle (done): round -1") == "idle"
    rounds = 30
    for n in range(rounds):
        for name in ("alice", "bob"):
            turn(store, name, f"round {n}")
        if n % 10 == 9:
            store.messages.send("alice", LEAD, f"peer {n // 10 + 1}")
        assert conn.xlen(store.keys.bus) <= BUS_CAP + BUS_CAP // 10
        assert len(store.messages.peek(LEAD)[1]) <= INBOX_CAP

    unread = store.messages.peek(LEAD)[1]
    assert kept_kinds(unread) == [
        ("peer.message", "peer 0: the schema is ready"),
        (ProtocolType.SHUTDOWN_RESPONSE, f"bob rejects shutdown request {request.id}: still busy"),
        ("peer.message", "peer 1"),
        ("peer.message", "peer 2"),
        ("peer.message", "peer 3"),
    ]
    summaries = [m for m in unread if m.type == SystemType.INBOX_SUMMARY]
    assert len(summaries) == 1 and summaries[0].from_ == "system"
    match = SUMMARY.fullmatch(summaries[0].content)
    assert match, summaries[0].content
    folded, idle_folded, teammates = match.groups()
    idle_shown = [idle_label(m) for m in unread if m.type == SystemType.TEAMMATE_IDLE]
    produced = 2 * rounds + 1
    assert int(folded) == int(idle_folded) == produced - len(idle_shown)
    # The newest notices stay, in order; the folded ones are the oldest.
    newest = [f"round {n}" for n in range(rounds) for _ in (0, 1)][-len(idle_shown) :]
    assert idle_shown == newest and len(unread) <= INBOX_CAP
    counts = dict(part.split(" ") for part in teammates.split(", "))
    alice_shown = sum(
        m.content.startswith("alice") for m in unread if m.type == SystemType.TEAMMATE_IDLE
    )
    assert counts == {
        "alice": str(rounds - alice_shown),
        "bob": str(rounds + 1 - (len(idle_shown) - alice_shown)),
    }


def test_a_lead_reading_meanwhile_gets_each_message_once_and_no_folded_one(
    conn: redis.Redis,
) -> None:
    store = team(
        conn, bus_max_messages=BUS_CAP, lead_inbox_max_messages=INBOX_CAP, inbox_batch_messages=4
    )
    owner = "lead:test"
    conn.set(store.keys.lead_lease, owner)
    memory = LeadMemory(store, owner)
    delivered: list[dict[str, str]] = []
    rounds = 0

    def read(batch: InboxBatch) -> None:
        memory.commit(batch.offset, [])
        delivered.extend(batch.lines)

    for step in range(25):
        batch = unread_batch(store, LEAD)  # what the lead's next model call is given
        # While the lead's model thinks, teammates go idle and the inbox folds.
        for _ in range(3):
            for name in ("alice", "bob"):
                turn(store, name, f"round {rounds}")
            rounds += 1
        if step % 5 == 0:
            store.messages.send("bob", LEAD, f"peer at step {step}")
        read(batch)
    while batch.lines:  # the lead drains what is left
        batch = unread_batch(store, LEAD)
        read(batch)

    assert_each_once(delivered, 2 * rounds, [f"peer at step {step}" for step in range(0, 25, 5)])


def assert_each_once(
    delivered: list[dict[str, str]], notices: int, peers: list[str], *, must_fold: bool = True
) -> None:
    """No message reached the lead twice; each of the `notices` idle notices reached it once, as
    itself or counted in one summary (so none was both); every peer message, in order."""
    assert len({line["id"] for line in delivered}) == len(delivered)
    idle = [line["content"] for line in delivered if line["type"] == SystemType.TEAMMATE_IDLE]
    assert len(set(idle)) == len(idle)
    folded = [
        SUMMARY.fullmatch(line["content"])
        for line in delivered
        if line["type"] == SystemType.INBOX_SUMMARY
    ]
    assert all(folded) and (folded or not must_fold), "the lead fell behind: some should fold"
    assert len(idle) + sum(int(m.group(1)) for m in folded if m) == notices
    assert [line["content"] for line in delivered if line["type"] == "peer.message"] == peers


def test_a_lead_reading_in_another_thread_gets_each_message_once(conn: redis.Redis) -> None:
    store = team(
        conn, bus_max_messages=BUS_CAP, lead_inbox_max_messages=INBOX_CAP, inbox_batch_messages=3
    )
    owner = "lead:thread"
    conn.set(store.keys.lead_lease, owner)
    lead_store = TeamStore(conn, store.team)
    memory = LeadMemory(lead_store, owner)
    delivered: list[dict[str, str]] = []
    stop = threading.Event()

    def lead() -> None:
        while True:
            batch = unread_batch(lead_store, LEAD)
            if batch.lines:
                stop.wait(0.05)  # the model's think time, while the teammates go on
                memory.commit(batch.offset, [])
                delivered.extend(batch.lines)
            elif stop.is_set():
                return

    reader = threading.Thread(target=lead)
    reader.start()
    try:
        rounds = 60
        for n in range(rounds):
            for name in ("alice", "bob"):
                turn(store, name, f"round {n}")
            if n % 20 == 0:
                store.messages.send("alice", LEAD, f"peer {n}")
    finally:
        stop.set()
        reader.join(30)
    assert not reader.is_alive()
    # How much folds depends on the two threads' pace; what reached the lead never does.
    assert_each_once(
        delivered, 2 * rounds, [f"peer {n}" for n in range(0, rounds, 20)], must_fold=False
    )


def test_a_teammate_is_refused_when_the_leads_inbox_is_full_of_kept_mail(conn: redis.Redis) -> None:
    store = team(conn, bus_max_messages=BUS_CAP, lead_inbox_max_messages=INBOX_CAP)
    for n in range(INBOX_CAP):
        store.messages.send("alice", LEAD, f"note {n}")
    with pytest.raises(LeadMailboxFull) as refused:
        store.messages.send("alice", LEAD, "one more")
    assert str(refused.value) == (
        "the lead has 10 unread messages, its bound (lead_inbox_max_messages 10), and none of "
        "them can be folded; alice's message was not sent. Wait for the lead to read its mail, "
        "or put what you wanted to say in a task result or a message to a teammate"
    )
    with pytest.raises(LeadMailboxFull):
        store.messages.broadcast("bob", "to everyone")
    # The teammate's model gets it as a tool error, and the turn goes on.
    store.messages.wake("alice")
    assert store.turns.begin_turn("alice", "test:1")[0] == "ok"
    answer = (
        TeammateTools(store, "alice")
        .toolbox()
        .call("send_message", json.dumps({"to": "lead", "content": "again"}), "c1")
    )
    assert answer.startswith("TOOL_ERROR: ")
    error = json.loads(answer.removeprefix("TOOL_ERROR: "))
    assert (error["errorType"], error["error"]) == ("LeadMailboxFull", str(refused.value))
    # A protocol answer is never refused: its request bounds it.
    request, _ = store.requests.request_shutdown("bob")
    store.requests.respond_shutdown("bob", request.id, True)
    unread = store.messages.peek(LEAD)[1]
    assert [m.content for m in unread][:INBOX_CAP] == [f"note {n}" for n in range(INBOX_CAP)]
    assert [m.type for m in unread][INBOX_CAP:] == [ProtocolType.SHUTDOWN_RESPONSE]
    # Once the lead has read, teammates may write again.
    last_id, _ = store.messages.peek(LEAD)
    conn.hset(store.keys.read_offsets, LEAD, last_id)
    store.messages.send("alice", LEAD, "after the lead read")
    assert [m.content for m in store.messages.peek(LEAD)[1]] == ["after the lead read"]


def big_backlog(conn: redis.Redis) -> TeamStore:
    """A lead-less team whose bus holds an old peer message to the lead, then 10,000 runtime
    messages published straight to it (no upkeep ran): 5,000 notices to the lead and 5,000
    messages to alice, which she has read."""
    store = team(conn, bus_max_messages=2000, lead_inbox_max_messages=1000)
    bus = store.bus
    bus.send("alice", LEAD, None, None, "an old peer message the lead keeps")
    for n in range(5000):
        bus.publish("system", LEAD, SystemType.TEAMMATE_IDLE, None, f"bob is idle (done): {n}")
        last = bus.publish("system", "alice", SystemType.TASK_ASSIGNED, None, f"task {n}")
    assert last is not None
    conn.hset(store.keys.read_offsets, "alice", last.id)
    assert conn.xlen(store.keys.bus) > 9000  # trimming alone cannot pass the lead's old mail
    return store


def test_folding_and_compacting_10000_messages_runs_in_bounded_script_calls(
    conn: redis.Redis,
) -> None:
    # Each call folds or compacts a bounded slice (FOLD_WALK, COMPACT_WORK): 2-4 ms on an idle
    # 2-core host, so a loaded CI host pushes many past 5 ms, while one walk of the whole
    # backlog costs ~200 ms. The test holds every call far below that; the 5 ms figure itself
    # is the benchmarks' to measure, on an unloaded host.
    stores: list[TeamStore] = []
    outcomes = []

    def measure() -> list[float]:
        stores.append(big_backlog(conn))
        with slowlog_at_the_rule(conn):
            outcomes.append(stores[-1].lead_inbox.keep_bounds())
            return slow_scripts_ms(
                conn, script_shas("lead_inbox_fold", "team_bus_compact", "trim_bus")
            )

    slow = first_within_the_rule(measure)
    assert all(ms < NOISE_CEILING_MS for ms in slow), slow
    store, outcome = stores[-1], outcomes[-1]
    assert outcome is not None and outcome.unread <= 1000 and outcome.folded >= 4000
    assert conn.xlen(store.keys.bus) == outcome.bus_length <= 2000
    unread = store.messages.peek(LEAD)[1]
    assert unread[0].content == "an old peer message the lead keeps"
    assert [m.type for m in unread].count(SystemType.INBOX_SUMMARY) == 1
    assert unread[-1].type == SystemType.INBOX_SUMMARY
    assert idle_label(unread[-2]) == "4999"


def test_the_team_file_sets_the_bounds_and_refuses_an_inbox_bigger_than_half_the_bus(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[teammates]\nbus_max_messages = 400\nlead_inbox_max_messages = 200\n")
    created = cli("team", "create", "--file", str(good), "-t", "bounded", "--redis-url", redis_url)
    assert created.exit_code == 0, created.output
    options = TeamStore(conn, "bounded").options
    assert (options.bus_max_messages, options.lead_inbox_max_messages) == (400, 200)
    bad = tmp_path / "bad.toml"
    bad.write_text("[teammates]\nbus_max_messages = 400\nlead_inbox_max_messages = 201\n")
    refused = cli("team", "create", "--file", str(bad), "-t", "unbounded", "--redis-url", redis_url)
    assert refused.exit_code == 2 and refused.stdout == ""
    assert (
        refused.stderr.count("\n") == 1
        and (
            "lead_inbox_max_messages (201) must be at most half of bus_max_messages (400), so the "
            "lead's unread mail fits on the bus beside the teammates'; lower it or raise "
            "bus_max_messages"
        )
        in refused.stderr
    )
    assert not TeamStore(conn, "unbounded").exists()
