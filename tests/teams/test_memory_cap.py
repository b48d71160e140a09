"""Memory capped by characters as well as messages: a checkpoint drops the oldest whole exchanges
past memory_max_chars, keeps a running size exact without walking the memory, keeps the newest
exchange whole, and no model request grows past the cap plus one exchange: a teammate's (on the
session's real workers, with large Python tool results) and the lead's. Real Redis, the scripted
model server through litellm."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import redis
from teamctl.coordinator.teams.lead import LeadAgent, LeadMemory
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.bus import LEAD
from teamctl.shared.keys import TeamKeys
from teamctl.shared.lease import LeadLease
from teamctl.shared.redis.scripts import sources
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.slowlog import within_the_rule
from tests.support.teams import inbox_lines
from tests.support.waiting import wait_until

FIXTURE = "tests.pytools_fixture.tools"
EXCHANGE_CHARS = 3500
"""More than one exchange of the model tests takes: an inbox block, a reply calling one tool and
its result of 2,500 characters, as JSON."""


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "list_teammates", "arguments": "{}"}}
    ],
}


def result(text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": "c1", "name": "list_teammates", "content": text}


def chars(messages: list[dict[str, Any]]) -> int:
    """Characters of the messages as memory stores them (JSON)."""
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages)


def stored_chars(conn: redis.Redis, key: str) -> int:
    return sum(len(raw) for raw in conn.lrange(key, 0, -1))


def recorded_chars(conn: redis.Redis, store: TeamStore, name: str) -> int:
    return int(conn.hget(store.keys.teammate(name), "memory_chars") or -1)


def request_chars(body: dict[str, Any]) -> int:
    """Characters of a model request's conversation (its system prompt aside)."""
    return chars([m for m in body["messages"] if m.get("role") != "system"])


def assert_whole(memory: list[dict[str, Any]]) -> None:
    """Memory starts at a user message and every tool call is followed by its results."""
    assert memory[0]["role"] == "user"
    for index, message in enumerate(memory):
        calls = message.get("tool_calls") or []
        results = memory[index + 1 : index + 1 + len(calls)]
        assert [r.get("tool_call_id") for r in results] == [c["id"] for c in calls]


def working_alice(conn: redis.Redis, team: str, options: TeamOptions) -> tuple[TeamStore, str]:
    """Alice in a turn this test plays (her job queues where nobody listens)."""
    store = TeamStore(conn, team)
    store.create(options)
    store.spawn("alice", role="dev", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    return store, token


def test_memory_past_its_character_cap_loses_the_oldest_whole_exchanges(
    conn: redis.Redis, team: str
) -> None:
    store, token = working_alice(conn, team, TeamOptions(memory_max_chars=1000))
    key = store.keys.memory("alice")
    big = "x" * 400
    assert store.turns.commit_step("alice", token, "", [CALL, result(big)]) == 0
    assert (
        recorded_chars(conn, store, "alice")
        == stored_chars(conn, key)
        == chars([user("p"), CALL, result(big)])
    )
    # Over 1,000 characters: the spawn prompt's exchange goes whole, with its call and result.
    assert store.turns.commit_step("alice", token, "", [user("m1"), said(big)]) == 3
    assert store.turns.memory("alice") == [user("m1"), said(big)]
    assert recorded_chars(conn, store, "alice") == stored_chars(conn, key)
    # The newest exchange alone is over the cap: it stays whole.
    assert store.turns.commit_step("alice", token, "", [CALL, result(big), said("a2")]) == 0
    assert store.turns.memory("alice") == [user("m1"), said(big), CALL, result(big), said("a2")]
    assert stored_chars(conn, key) > 1000
    assert recorded_chars(conn, store, "alice") == stored_chars(conn, key)
    # Characters, not bytes: "ü" and "🙂" count one each, as for the model.
    assert store.turns.commit_step("alice", token, "", [user("m2 ü🙂"), said("a3")]) == 5
    assert store.turns.memory("alice") == [user("m2 ü🙂"), said("a3")]
    assert (
        recorded_chars(conn, store, "alice")
        == stored_chars(conn, key)
        == chars([user("m2 ü🙂"), said("a3")])
    )


def test_a_memory_without_a_size_record_is_counted_once_and_a_respawn_starts_afresh(
    conn: redis.Redis, team: str
) -> None:
    store, token = working_alice(conn, team, TeamOptions(memory_max_chars=1000))
    key, teammate = store.keys.memory("alice"), store.keys.teammate("alice")
    assert conn.hget(teammate, "memory_chars") is None  # a fresh spawn: counted at its checkpoint
    assert store.turns.checkpoint("alice", token, "", [user("m1 é"), said("a1")])
    conn.hdel(teammate, "memory_chars", "memory_last_user")  # as a memory from before the record
    assert store.turns.commit_step("alice", token, "", [user("m2"), said("x" * 900)]) == 3
    assert store.turns.memory("alice") == [user("m2"), said("x" * 900)]
    assert recorded_chars(conn, store, "alice") == stored_chars(conn, key)
    store.requests.force_shutdown("alice")
    store.spawn(
        "alice", role="dev", prompt="again", model="m", api_base=None, queue=f"nobody-{team}"
    )
    assert conn.hget(teammate, "memory_chars") is None
    _, token = store.turns.begin_turn("alice", "test:1")
    assert store.turns.checkpoint("alice", token, "", [said("hi")])
    assert (
        recorded_chars(conn, store, "alice")
        == stored_chars(conn, key)
        == chars([user("again"), said("hi")])
    )


def test_a_checkpoint_on_a_large_memory_never_walks_it(conn: redis.Redis, team: str) -> None:
    """SLOWLOG at 5 ms: counting 10,000 messages once is seen; the later checkpoints, which
    append an exchange and drop the oldest, are not (bar a loaded host's few outliers)."""
    cap = 5_000_000
    store, token = working_alice(
        conn, team, TeamOptions(memory_max_chars=cap, memory_max_messages=100_000)
    )
    key = store.keys.memory("alice")
    pipe = conn.pipeline(transaction=False)
    for n in range(5000):
        pipe.rpush(key, json.dumps(user(f"{n} " + "u" * 480)), json.dumps(said("a" * 480)))
    pipe.execute()
    sha = conn.script_load(sources()["turn_checkpoint"])
    threshold = conn.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    conn.config_set("slowlog-log-slower-than", 5000)
    try:
        conn.slowlog_reset()
        store.turns.checkpoint("alice", token, "", [user("first"), said("counted")])
        walks = [e for e in conn.slowlog_get(128) if sha in str(e.get("command"))]
        assert walks, "the one count of the whole memory should take over 5 ms"
        conn.slowlog_reset()
        for n in range(100):
            assert (
                store.turns.commit_step(
                    "alice", token, "", [user(f"new {n} " + "n" * 480), said("b" * 480)]
                )
                == 2
            )
        slow = [e["duration"] / 1000 for e in conn.slowlog_get(128) if sha in str(e.get("command"))]
        # A walk on each of the 100 would show on most of them; a loaded host, on a few.
        assert within_the_rule(slow, calls=100), slow
    finally:
        conn.config_set("slowlog-log-slower-than", threshold)
    assert recorded_chars(conn, store, "alice") == stored_chars(conn, key) <= cap
    assert store.turns.memory("alice")[-1] == said("b" * 480)


def test_a_teammate_with_large_tool_results_keeps_its_memory_under_the_cap(
    workers: str, llm: ScriptedLLM
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    store = TeamStore(conn, f"t{time.time_ns() % 10**10}")
    cap = 20_000
    store.create(TeamOptions(memory_max_chars=cap, turn_max_steps=40))
    steps = 30
    calls = 0

    def model(body: dict[str, Any]) -> str | ToolCalls:
        # Each step gets a note and a large result: 30 exchanges of ~3,000 characters each.
        nonlocal calls
        calls += 1
        if calls > steps:
            return "done"
        store.messages.send(LEAD, "alice", f"note {calls}")
        return ToolCalls([("long_text", {"chars": 2500})])

    alice = llm.script(f"alice-{store.team}", handler=model)
    store.spawn(
        "alice",
        role="dev",
        prompt="Work.",
        model=alice,
        api_base=llm.api_base,
        queue="members",
        tools=[f"{FIXTURE}:long_text"],
    )
    wait_until(
        lambda: store.get("alice").status is TeammateStatus.IDLE,
        60,
        message="alice never went idle",
    )
    assert calls == steps + 1 and store.get("alice").idle_reason == "done"
    memory = store.turns.memory("alice")
    key = store.keys.memory("alice")
    assert recorded_chars(conn, store, "alice") == stored_chars(conn, key)
    assert cap - EXCHANGE_CHARS < stored_chars(conn, key) <= cap  # only what had to go went
    assert_whole(memory)
    assert memory[0]["content"].startswith("<inbox>")  # the spawn prompt's exchange went
    assert [m["content"] for m in inbox_lines(memory)][-1] == f"note {steps}"
    assert memory[-1] == {"role": "assistant", "content": "done"}
    sizes = [request_chars(body) for body in llm.requests[f"alice-{store.team}"]]
    assert max(sizes) <= cap + EXCHANGE_CHARS
    assert sizes[-1] > cap - EXCHANGE_CHARS  # the conversation sent is what memory keeps


def test_the_leads_memory_and_requests_stay_under_the_character_cap(
    conn: redis.Redis, llm: ScriptedLLM, team: str, tmp_path: Path
) -> None:
    store = TeamStore(conn, team)
    cap = 8000
    store.create(TeamOptions(memory_max_chars=cap))
    store.spawn("alice", role="dev", prompt="p", model="m", api_base=None, queue=f"nobody-{team}")
    steps = 12
    calls = 0

    def model(body: dict[str, Any]) -> str | ToolCalls:
        # A report of 1,500 characters arrives at every step of the lead's turn.
        nonlocal calls
        calls += 1
        if calls > steps:
            return "all read"
        store.messages.send("alice", LEAD, f"report {calls} " + "r" * 1500)
        return ToolCalls([("list_teammates", {})])

    lead_model = llm.script(f"lead-{team}", handler=model)
    keys = TeamKeys(team)
    with LeadLease(conn, keys, 30) as lease:
        agent = LeadAgent(
            store, lease, LitellmClient(provider_keys=()), lead_model, llm.api_base, tmp_path / "ws"
        )
        assert agent.turn("Read the reports.") == "all read"
        memory = agent.memory.load()
        size = {k: int(v) for k, v in conn.hgetall(keys.lead_memory_size).items()}
        assert size["chars"] == stored_chars(conn, keys.lead_memory) <= cap
        assert memory[size["last_user"]]["content"].startswith("<inbox>")
        assert_whole(memory)
        assert injected_reports(memory)[-1].startswith(f"report {steps} ")
        sizes = [request_chars(body) for body in llm.requests[f"lead-{team}"]]
        assert max(sizes) <= cap + EXCHANGE_CHARS
        assert LeadMemory(store, lease.owner).commit("", [user("again")], reset=True) == 0
        assert agent.memory.load() == [user("again")]
        assert conn.hgetall(keys.lead_memory_size) == {
            "chars": str(chars([user("again")])),
            "last_user": "0",
            "seq": "1",
            "turns": "0",
            "epoch": "1",
        }


def injected_reports(memory: list[dict[str, Any]]) -> list[str]:
    """The contents of the mail injected into the lead's memory, in order."""
    found = []
    for message in memory:
        content = message.get("content") or ""
        if message["role"] == "user" and "<inbox>" in content:
            block = content.split("<inbox>\n", 1)[1].split("\n</inbox>", 1)[0]
            found += [json.loads(line)["content"] for line in block.splitlines()]
    return found
