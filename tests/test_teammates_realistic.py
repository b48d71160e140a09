"""Persistent teammates at the default team options with model calls that take seconds, as real
providers' do (issue 12 asks tests 1, 3 and 9 to run so once; this is test 1). At the fast scale
the calls take tenths of a second; the realistic tier runs it at 1x: 3.5-10.5 s a call, longer
than the turn lease's refresh interval and than any socket timeout."""

from __future__ import annotations

import uuid

import pytest
import redis
from teamctl.shared.models import SystemType
from teamctl.shared.teammates import MateStatus, TeamOptions
from teamctl.shared.teams import TeamStore

from tests.conftest import wait_until
from tests.scripted_llm import ScriptedLLM, ToolCalls
from tests.team_support import inbox_lines, spawn
from tests.timescale import scaled


@pytest.mark.realistic
def test_alice_and_bob_converse_at_the_defaults_with_slow_models(
        workers: str, llm: ScriptedLLM) -> None:
    team = f"t{uuid.uuid4().hex[:10]}"
    conn = redis.Redis.from_url(workers, decode_responses=True)
    slow = {"latency_s": scaled(7), "latency_seed": 11}  # 3.5-10.5 s a call at 1x
    bob = llm.script(f"bob-{team}", [
        "ready",
        ToolCalls([("send_message", {"to": "lead", "content": "alice says hi"})]),
        "done"], **slow)
    alice = llm.script(f"alice-{team}", [
        ToolCalls([("send_message", {"to": "bob", "content": "hi bob"})]), "sent it"], **slow)
    store = TeamStore(conn, team)
    turn_s = scaled(30, floor_s=30)  # a turn of two calls, plus a worker's fork on a busy host

    assert spawn(workers, team, "bob", bob, llm.api_base).exit_code == 0
    assert store.options == TeamOptions()  # the first spawn made the team at the defaults
    wait_until(lambda: store.get("bob").status is MateStatus.IDLE, turn_s,
               message="bob's first turn")
    assert spawn(workers, team, "alice", alice, llm.api_base).exit_code == 0
    wait_until(lambda: len(store.notices(SystemType.TEAMMATE_IDLE)) == 3
               and all(m.status is MateStatus.IDLE for m in store.mates()), 3 * turn_s,
               message="alice and bob idle after bob's answer")

    # No turn was taken for stalled: the slow calls never let a turn lease lapse.
    assert [(m.name, m.attempts, m.last_error) for m in store.mates()] == [
        ("bob", 0, None), ("alice", 0, None)]
    assert [m["content"] for m in inbox_lines(store.memory("bob"))] == ["hi bob"]
    assert len(llm.requests[f"bob-{team}"]) == 3 and len(llm.requests[f"alice-{team}"]) == 2
    store.delete()
