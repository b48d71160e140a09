"""Persistent teammates at the default team options with model calls that take seconds, as real
providers' do: a conversation, and the team task board handing tasks out by role and at turn
ends. At the fast scale the calls take tenths of a second; the realistic tier runs them at 1x:
3.5-10.5 s a call, longer than the turn lease's refresh interval and than any socket timeout."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
import redis
from teamctl.shared.envelopes import SystemType
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import inbox_lines, spawn
from tests.support.timescale import scaled
from tests.support.waiting import wait_until


@pytest.mark.realistic
def test_alice_and_bob_converse_at_the_defaults_with_slow_models(
    workers: str, llm: ScriptedLLM
) -> None:
    team = f"t{uuid.uuid4().hex[:10]}"
    conn = redis.Redis.from_url(workers, decode_responses=True)
    slow = {"latency_s": scaled(7), "latency_seed": 11}  # 3.5-10.5 s a call at 1x
    bob = llm.script(
        f"bob-{team}",
        [
            "ready",
            ToolCalls([("send_message", {"to": "lead", "content": "alice says hi"})]),
            "done",
        ],
        **slow,
    )
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", {"to": "bob", "content": "hi bob"})]), "sent it"],
        **slow,
    )
    store = TeamStore(conn, team)
    turn_s = scaled(30, floor_s=30)  # a turn of two calls, plus a worker's fork on a busy host

    assert spawn(workers, team, "bob", bob, llm.api_base).exit_code == 0
    assert store.options == TeamOptions()  # the first spawn made the team at the defaults
    wait_until(
        lambda: store.get("bob").status is TeammateStatus.IDLE, turn_s, message="bob's first turn"
    )
    assert spawn(workers, team, "alice", alice, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            len(store.messages.notices(SystemType.TEAMMATE_IDLE)) == 3
            and all(m.status is TeammateStatus.IDLE for m in store.teammates())
        ),
        3 * turn_s,
        message="alice and bob idle after bob's answer",
    )

    # No turn was taken for stalled: the slow calls never let a turn lease lapse.
    assert [(m.name, m.attempts, m.last_error) for m in store.teammates()] == [
        ("bob", 0, None),
        ("alice", 0, None),
    ]
    assert [m["content"] for m in inbox_lines(store.turns.memory("bob"))] == ["hi bob"]
    assert len(llm.requests[f"bob-{team}"]) == 3 and len(llm.requests[f"alice-{team}"]) == 2
    store.delete()


ASSIGNED = re.compile(r"You now hold (task_\d+)")


def doer(body: dict[str, Any]) -> str | ToolCalls:
    """A teammate's model: completes the task the last task.assigned gave it, else answers."""
    last = body["messages"][-1]
    found = ASSIGNED.findall(last.get("content") or "") if last["role"] == "user" else []
    if not found:
        return "ready" if last["role"] == "user" else "done"
    return ToolCalls([("complete_task", {"task_id": found[-1], "result": f"did {found[-1]}"})])


@pytest.mark.realistic
def test_the_task_board_hands_out_by_role_and_at_turn_ends_with_slow_models(
    workers: str, llm: ScriptedLLM
) -> None:
    team = f"t{uuid.uuid4().hex[:10]}"
    conn = redis.Redis.from_url(workers, decode_responses=True)
    slow = {"latency_s": scaled(7), "latency_seed": 5}
    store = TeamStore(conn, team)
    turn_s = scaled(30, floor_s=30)
    for name in ("dev", "qa"):
        model = llm.script(f"{name}-{team}", handler=doer, **slow)
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            all(m.status is TeammateStatus.IDLE for m in store.teammates())
            and len(store.teammates()) == 2
        ),
        2 * turn_s,
        message="both first turns",
    )

    tasks = TeamTasks(store)
    first, _ = tasks.add("build it", role="dev-role")
    tasks.add("check it", role="qa-role", after=[first.task_id])
    tasks.add("build more", role="dev-role")
    # dev takes task_1 at once and task_3 at that turn's end; qa gets task_2 when task_1 is done.
    wait_until(
        lambda: all(t.status is TaskStatus.COMPLETED for t in tasks.snapshot()),
        4 * turn_s,
        message="the three tasks completed",
    )
    assert [(t.task_id, t.claimed_by, t.output, t.attempts) for t in tasks.snapshot()] == [
        ("task_1", "dev", "did task_1", 1),
        ("task_2", "qa", "did task_2", 1),
        ("task_3", "dev", "did task_3", 1),
    ]
    wait_until(
        lambda: all(m.status is TeammateStatus.IDLE for m in store.teammates()),
        2 * turn_s,
        message="both idle again",
    )
    assert [(m.name, m.attempts, m.last_error) for m in store.teammates()] == [
        ("dev", 0, None),
        ("qa", 0, None),
    ]
    assert sorted(m.task_id for m in store.messages.notices(SystemType.TASK_RESULT)) == [
        "task_1",
        "task_2",
        "task_3",
    ]
    store.delete()
