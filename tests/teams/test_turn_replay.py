"""A turn killed between a tool call's team write and the checkpoint of its result: the rerun
replays the recorded write instead of repeating it, and a revoked turn's guarded
writes are refused. The killed turn is played here step by step on real Redis, its lease left to
expire; the rerun is the real turn job body against the scripted model."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from teamctl.shared.bus import LEAD
from teamctl.shared.redis.scripts import TurnRevokedError
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.worker.teams.teammate_tools import TeammateTools
from teamctl.worker.teams.turn import execute_turn

from tests.support.llm import ScriptedLLM
from tests.support.waiting import wait_until

TTL_S = 2.0  # long enough for the rerun to keep its lease on a busy host


def crashed_turn(
    conn: redis.Redis,
    llm: ScriptedLLM,
    tool: str,
    arguments: dict[str, Any] | Callable[[TeamStore], dict[str, Any]],
    replies: list[str],
    prepare: Callable[[TeamStore, str], None] | None = None,
) -> tuple[TeamStore, str, str]:
    """Alice's turn committed a reply calling `tool`, ran that call's team write, and died
    before its result was committed; returns the store, the dead token and the tool result.
    `prepare(store, token)` sets the scene first (teammates, tasks, requests)."""
    team = f"r{uuid.uuid4().hex[:10]}"
    store = TeamStore(conn, team)
    store.create(TeamOptions(heartbeat_ttl_s=TTL_S))
    model = llm.script(f"alice-{team}", list(replies))
    # A queue nobody serves: this test plays the turns itself.
    store.spawn(
        "alice",
        role="writer",
        prompt="Greet the lead.",
        model=model,
        api_base=llm.api_base,
        queue=f"nobody-{team}",
    )
    verdict, token = store.turns.begin_turn("alice", "test:1")
    assert verdict == "ok"
    if prepare is not None:
        prepare(store, token)
    if callable(arguments):  # arguments naming what `prepare` made
        arguments = arguments(store)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(arguments)},
    }
    assert store.turns.checkpoint(
        "alice", token, "", [{"role": "assistant", "content": None, "tool_calls": [call]}]
    )
    tools = TeammateTools(store, "alice", token)
    with tools.writing_through(store.guarded("alice", token, "0:call_1")):
        result = tools.toolbox().call(tool, call["function"]["arguments"], "call_1")
    return store, token, result


def rerun(store: TeamStore) -> str:
    """Wait for the dead turn's lease to lapse, reconcile, and run the rerun's job body."""
    assert wait_until(
        lambda: store.scheduler.reconcile(), 10 * TTL_S + 5, message="reconcile to rerun alice"
    ) == ["alice"]
    return execute_turn(store.conn, store.team, "alice")


def test_a_send_made_before_the_crash_is_replayed_not_repeated(
    redis_server: str, llm: ScriptedLLM
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    store, _, first = crashed_turn(
        conn, llm, "send_message", {"to": "lead", "content": "hello"}, ["all sent"]
    )
    assert json.loads(first)["ok"] is True
    assert rerun(store) == "idle"

    greetings = [m for m in store.messages.kept(LEAD) if m.type == "peer.message"]
    assert [(m.from_, m.content) for m in greetings] == [("alice", "hello")]
    memory = store.turns.memory("alice")
    assert [m["role"] for m in memory] == ["user", "assistant", "tool", "assistant"]
    # The rerun's tool result is the first call's outcome (same message id), recorded once.
    assert json.loads(memory[2]["content"]) == json.loads(first)
    assert json.loads(first)["id"] == greetings[0].id
    assert memory[-1]["content"] == "all sent"
    assert len(llm.requests[store.get("alice").model.split("/", 1)[1]]) == 1
    assert store.get("alice").status is TeammateStatus.IDLE
    assert not conn.exists(store.keys.effects("alice"))  # the checkpoint cleared the record


def test_a_submitted_plan_is_replayed_with_its_request(redis_server: str, llm: ScriptedLLM) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    team = f"r{uuid.uuid4().hex[:10]}"
    store = TeamStore(conn, team)
    store.create(TeamOptions(heartbeat_ttl_s=TTL_S))
    model = llm.script(f"alice-{team}", ["waiting for review"])
    store.spawn(
        "alice",
        role="writer",
        prompt="Plan first.",
        model=model,
        api_base=llm.api_base,
        queue=f"nobody-{team}",
        plan_mode=True,
    )
    _, token = store.turns.begin_turn("alice", "test:1")
    call = {
        "id": "call_9",
        "type": "function",
        "function": {"name": "submit_plan", "arguments": json.dumps({"plan": "1. write"})},
    }
    assert store.turns.checkpoint(
        "alice", token, "", [{"role": "assistant", "content": None, "tool_calls": [call]}]
    )
    tools = TeammateTools(store, "alice")
    with tools.writing_through(store.guarded("alice", token, "0:call_9")):
        first = json.loads(
            tools.toolbox().call("submit_plan", call["function"]["arguments"], "call_9")
        )
    assert first["ok"] is True
    assert rerun(store) == "idle"

    assert [r.id for r in store.requests.all()] == [first["request_id"]]
    assert json.loads(store.turns.memory("alice")[2]["content"]) == first


def test_a_revoked_turn_cannot_write_through_its_guard(redis_server: str, llm: ScriptedLLM) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    store, token, _ = crashed_turn(conn, llm, "list_teammates", {}, [])
    store.requests.force_shutdown("alice")
    before = store.bus.messages()
    with pytest.raises(TurnRevokedError):
        store.guarded("alice", token, "1:call_2").messages.send("alice", LEAD, "late")
    assert store.bus.messages() == before


def with_bob(store: TeamStore, _token: str) -> None:
    store.spawn(
        "bob", role="reader", prompt="Read.", model="m", api_base=None, queue=f"nobody-{store.team}"
    )


def with_a_task(store: TeamStore, _token: str) -> None:
    TeamTasks(store).add("write the intro")


def holding_a_task(store: TeamStore, token: str) -> None:
    TeamTasks(store).add("write the intro")
    TeamTasks(store).claim("alice", token, "task_1")


def asked_to_shut_down(store: TeamStore, _token: str) -> None:
    store.requests.request_shutdown("alice", "the day is over")


def lead_mail(store: TeamStore, type_: str) -> list[str]:
    return [m.content for m in store.messages.kept(LEAD) if m.type == type_]


@pytest.mark.parametrize(
    ("tool", "arguments", "prepare", "replies", "written"),
    [
        (
            "broadcast",
            {"content": "news"},
            with_bob,
            1,
            lambda store: [m.content for m in store.bus.messages() if m.type == "peer.broadcast"],
        ),
        # Holding the task it claimed, alice gets one reminder turn after the rerun.
        (
            "claim_task",
            {"task_id": "task_1"},
            with_a_task,
            2,
            lambda store: [TeamTasks(store).get("task_1").attempts],
        ),
        (
            "complete_task",
            {"task_id": "task_1", "result": "done it"},
            holding_a_task,
            1,
            lambda store: lead_mail(store, "task.result"),
        ),
        (
            "respond_shutdown",
            lambda store: {"request_id": store.requests.all()[0].id, "approve": True},
            asked_to_shut_down,
            0,
            lambda store: lead_mail(store, "shutdown_response"),
        ),
    ],
    ids=["broadcast", "claim_task", "complete_task", "respond_shutdown"],
)
def test_each_team_write_of_a_killed_step_happens_once(
    redis_server: str,
    llm: ScriptedLLM,
    tool: str,
    arguments: Any,
    prepare: Callable[[TeamStore, str], None],
    replies: int,
    written: Callable[[TeamStore], list[Any]],
) -> None:
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    store, _, first = crashed_turn(conn, llm, tool, arguments, ["done"] * replies, prepare)
    assert json.loads(first)["ok"] is True
    before = written(store)
    assert len(before) == 1
    rerun(store)
    assert written(store) == before  # the rerun's call replayed the write, not repeated it
    assert json.loads(store.turns.memory("alice")[2]["content"]) == json.loads(first)
