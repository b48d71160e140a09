"""Plan approval for persistent teammates: a teammate spawned with --plan-mode
submits a plan, the lead rejects it (the gate stays, the teammate revises) or approves it, one
pending request at a time, each answer waking the teammate. Real Redis, the session's real
workers on `members`, the scripted model server through litellm."""

from __future__ import annotations

import pytest
import redis
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.envelopes import ProtocolMessage, ProtocolType, SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.teams.team_base import RequestRefused
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import RequestKind, RequestStatus, TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import cli, spawn
from tests.support.waiting import wait_until


def idle_notices(store: TeamStore) -> int:
    return len(store.messages.notices(SystemType.TEAMMATE_IDLE))


def test_a_rejected_plan_is_revised_and_the_approved_one_opens_the_gate(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    model = llm.script(
        f"pat-{team}",
        [
            ToolCalls([("submit_plan", {"plan": "v1: look around"})]),
            "waiting for review",
            ToolCalls([("submit_plan", {"plan": "v2: look around, then report"})]),
            "waiting again",
            "carrying it out",
        ],
    )
    store = TeamStore(wconn, team)
    base = ("-t", team, "--redis-url", workers)
    assert spawn(workers, team, "pat", model, llm.api_base, "--plan-mode").exit_code == 0
    wait_until(lambda: idle_notices(store) == 1, message="pat's plan submitted")
    [first] = store.requests.all()
    assert (first.kind, first.from_, first.to, first.status, first.payload) == (
        RequestKind.PLAN_APPROVAL,
        "pat",
        "lead",
        RequestStatus.PENDING,
        "v1: look around",
    )
    [asked] = [m for m in store.messages.peek("lead")[1] if isinstance(m, ProtocolMessage)]
    assert (asked.type, asked.from_, asked.request_id) == (
        ProtocolType.PLAN_APPROVAL_REQUEST,
        "pat",
        first.id,
    )
    assert store.get("pat").plan_state == "pending"
    with pytest.raises(RequestRefused, match=f"plan request {first.id} is still pending"):
        store.requests.submit_plan("pat", "v1b")
    rejected = cli("team", "review", first.id, "--reject", "--feedback", "add a report", *base)
    assert rejected.exit_code == 0 and "woke the teammate" in rejected.output, rejected.output
    wait_until(lambda: idle_notices(store) == 2, message="pat's revised plan")
    assert store.requests.get(first.id).status is RequestStatus.REJECTED
    assert store.requests.get(first.id).resolved_by == "lead"
    again = cli("team", "review", first.id, "--approve", *base)
    assert again.exit_code == 1 and "already rejected" in again.output
    [_, second] = store.requests.all()
    assert (
        second.payload == "v2: look around, then report"
        and store.get("pat").plan_state == "pending"
    )
    assert cli("team", "review", second.id, "--approve", *base).exit_code == 0
    wait_until(lambda: idle_notices(store) == 3, message="pat carrying out its plan")
    assert store.get("pat").plan_state == "approved"
    assert store.requests.get(second.id).status is RequestStatus.APPROVED
    prompts = [body["messages"][0]["content"] for body in llm.requests[f"pat-{team}"]]
    assert "Plan mode: on: before changing anything" in prompts[0]
    assert "your plan is approved" in prompts[-1]
    responses = [
        line
        for line in store.turns.memory("pat")
        if "plan_approval_response" in str(line.get("content"))
    ]
    assert len(responses) == 2
    with pytest.raises(RequestRefused, match="not waiting for a plan approval"):
        store.requests.submit_plan("pat", "v3")


def test_plan_reviews_with_misused_ids_are_refused(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    base = ("-t", team, "--redis-url", redis_url)
    for name, extra in (("pat", ("--plan-mode",)), ("sam", ())):  # nobody serves "nobody"
        assert (
            spawn(redis_url, team, name, OFFLINE_MODEL, None, "--queue", "nobody", *extra).exit_code
            == 0
        )
    with pytest.raises(RequestRefused, match="plan mode off"):
        store.requests.submit_plan("sam", "anything")
    plan = store.requests.submit_plan("pat", "the plan")
    shutdown, _ = store.requests.request_shutdown("sam")
    assert cli("team", "review", "req_000000000000", "--approve", *base).exit_code == 2
    assert cli("team", "review", "nonsense", "--approve", *base).exit_code == 2
    wrong = cli("team", "review", shutdown.id, "--approve", *base)
    assert wrong.exit_code == 2 and "is a shutdown request" in wrong.output
    assert cli("team", "review", plan.id, *base).exit_code == 2  # neither --approve nor --reject
    with pytest.raises(ConfigError, match="is a plan_approval request"):
        store.requests.respond_shutdown("pat", plan.id, True)
    assert store.requests.get(plan.id).status is RequestStatus.PENDING
    assert store.requests.get(shutdown.id).status is RequestStatus.PENDING
    assert (
        store.get("pat").plan_state == "pending"
        and store.get("sam").status is TeammateStatus.WORKING
    )


def idle_now(store: TeamStore, name: str) -> None:
    """End the queued turn of a teammate nobody serves, as a worker would: it goes idle."""
    verdict, token = store.turns.begin_turn(name, "test:1")
    assert verdict == "ok"
    assert store.turns.end_turn(name, token, "done", "", force=True) == "idle"


def test_a_re_spawn_expires_the_pending_plan_and_an_old_lifes_request_is_refused(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    """The repro: approving the plan of an earlier life must not approve the new one."""
    store = TeamStore(conn, team)
    base = ("-t", team, "--redis-url", redis_url)
    args = ("--queue", "nobody", "--plan-mode")
    assert spawn(redis_url, team, "pat", OFFLINE_MODEL, None, *args).exit_code == 0
    old = store.requests.submit_plan("pat", "v1")
    assert (old.status, old.epoch) == (RequestStatus.PENDING, 1)
    idle_now(store, "pat")
    assert spawn(redis_url, team, "pat", OFFLINE_MODEL, None, *args).exit_code == 0
    assert (store.requests.get(old.id).status, store.requests.get(old.id).resolved_by) == (
        RequestStatus.EXPIRED,
        "system",
    )
    assert [(e.status, e.detail) for e in store.messages.events() if e.request == old.id][-1] == (
        "expired",
        "plan_approval pat re-spawned",
    )
    refused = cli("team", "review", old.id, "--approve", *base)
    assert refused.exit_code == 1
    assert refused.stderr.strip().splitlines() == [f"teamctl: request {old.id} is already expired"]
    pat = store.get("pat")
    assert (pat.plan_state, pat.plan_request, pat.epoch) == ("required", None, 2)

    # A record an older version left pending (no set lists it, no epoch) is refused as stale.
    new = store.requests.submit_plan("pat", "v2")
    conn.hset(store.keys.request(old.id), mapping={"status": "pending", "epoch": "0"})
    before = (conn.hgetall(store.keys.teammate("pat")), conn.xlen(store.keys.bus))
    with pytest.raises(RequestRefused) as stale:
        store.requests.review_plan(old.id, True)
    assert str(stale.value) == (
        f"request {old.id} is not pat's current plan_approval request (pat was re-spawned since "
        f"it was made, or its current one is {new.id}); nothing changed"
    )
    assert (conn.hgetall(store.keys.teammate("pat")), conn.xlen(store.keys.bus)) == before
    assert store.requests.get(new.id).status is RequestStatus.PENDING
    store.requests.review_plan(new.id, True)
    assert store.get("pat").plan_state == "approved"
