"""The shutdown protocol of persistent teammates: durable request records, approve,
reject, expiry, `--force` revoking a live turn, and the refusals that change nothing. Real
Redis, the session's real workers on `members`, the scripted model server through litellm."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.envelopes import ProtocolMessage, ProtocolType, SystemType
from teamctl.shared.errors import ConfigError
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_base import RequestRefused
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import RequestStatus, TeammateStatus

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teams import HeldFirstCall, cli, spawn
from tests.support.waiting import wait_until
from tests.support.workers import workers_idle

_REQUEST_ID = re.compile(r'\\"request_id\\": \\"(req_[0-9a-f]{12})\\"')


def request_in(body: dict[str, Any]) -> str | None:
    """The request_id of the last shutdown_request injected into a model request, if any."""
    found = _REQUEST_ID.findall(json.dumps(body["messages"]))
    return found[-1] if found else None


class Answers:
    """A teammate's model: 'ready' until a shutdown request arrives, then one respond_shutdown
    with `approve`, then `after` for every later call."""

    def __init__(self, approve: bool, after: str = "still here") -> None:
        self.approve = approve
        self.after = after
        self.calls = 0
        self.answered = False

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.calls += 1
        request_id = request_in(body)
        if request_id is None:
            return "ready"
        if self.answered:
            return self.after
        self.answered = True
        return ToolCalls(
            [
                (
                    "respond_shutdown",
                    {"request_id": request_id, "approve": self.approve, "reason": "ok by me"},
                )
            ]
        )


def lead_protocol(store: TeamStore) -> list[ProtocolMessage]:
    return [m for m in store.messages.peek("lead")[1] if isinstance(m, ProtocolMessage)]


def test_an_approved_shutdown_ends_the_turn_and_later_mail_wakes_nothing(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    answers = Answers(approve=True)
    model = llm.script(f"alice-{team}", handler=answers)
    store = TeamStore(wconn, team)
    base = ("-t", team, "--redis-url", workers)
    assert spawn(workers, team, "alice", model, llm.api_base).exit_code == 0
    wait_until(lambda: store.get("alice").status is TeammateStatus.IDLE, message="alice idle")
    asked = cli("team", "shutdown", "alice", "--reason", "wrapping up", "--wait", "30", *base)
    assert asked.exit_code == 0, asked.output
    [record] = store.requests.all()
    assert f"request {record.id} approved: ok by me" in asked.output
    assert (
        record.kind,
        record.from_,
        record.to,
        record.status,
        record.payload,
        record.resolved_by,
    ) == ("shutdown", "lead", "alice", RequestStatus.APPROVED, "wrapping up", "alice")
    assert record.created_ms <= record.resolved_ms <= record.deadline_ms
    assert store.get("alice").status is TeammateStatus.SHUTDOWN
    [response] = lead_protocol(store)
    assert (response.type, response.request_id, response.approve) == (
        ProtocolType.SHUTDOWN_RESPONSE,
        record.id,
        True,
    )
    [notice] = store.messages.notices(SystemType.TEAMMATE_SHUTDOWN)
    assert notice.content == f"alice shut down (request {record.id} approved)"
    # The turn ended after the approving step: no further model call.
    assert answers.calls == 2
    # Mail to a shut-down teammate waits unread and wakes nothing; asking again is refused.
    sent = cli("team", "send", "alice", "are you there?", *base)
    assert sent.exit_code == 0 and "woke" not in sent.output
    assert [m.content for m in store.messages.peek("alice")[1]] == ["are you there?"]
    again = cli("team", "shutdown", "alice", *base)
    assert again.exit_code == 1 and "already shut down" in again.output
    wait_until(lambda: workers_idle(workers), message="the turn's job to finish")
    assert store.get("alice").status is TeammateStatus.SHUTDOWN and answers.calls == 2
    listed = json.loads(cli("team", "requests", "--json", *base).output)
    assert [(r["id"], r["status"]) for r in listed] == [(record.id, "approved")]
    assert cli("team", "requests", "--pending", "--json", *base).output.strip() == "[]"


def test_a_rejected_shutdown_lets_the_teammate_go_on(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    answers = Answers(approve=False, after="carrying on")
    model = llm.script(f"bob-{team}", handler=answers)
    store = TeamStore(wconn, team)
    base = ("-t", team, "--redis-url", workers)
    assert spawn(workers, team, "bob", model, llm.api_base).exit_code == 0
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob idle")
    asked = cli("team", "shutdown", "bob", "--wait", "30", *base)
    assert asked.exit_code == 0, asked.output
    [record] = store.requests.all()
    assert record.status is RequestStatus.REJECTED and record.resolved_by == "bob"
    assert f"request {record.id} rejected" in asked.output
    [response] = lead_protocol(store)
    assert (response.request_id, response.approve) == (record.id, False)
    # It answered, then went on within the same turn and ended idle, not shut down.
    wait_until(
        lambda: len(store.messages.notices(SystemType.TEAMMATE_IDLE)) == 2, message="bob idle"
    )
    assert store.get("bob").status is TeammateStatus.IDLE
    assert store.messages.notices(SystemType.TEAMMATE_SHUTDOWN) == []
    assert answers.calls == 3
    assert cli("team", "send", "bob", "next job", *base).exit_code == 0
    wait_until(
        lambda: len(store.messages.notices(SystemType.TEAMMATE_IDLE)) == 3, message="bob woke"
    )
    assert answers.calls == 4


def test_an_unanswered_shutdown_expires_and_force_revokes_the_live_turn(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    store.create(TeamOptions(shutdown_deadline_s=1.5))
    held = HeldFirstCall("late answer", "late answer")
    model = llm.script(f"carol-{team}", handler=held)
    base = ("-t", team, "--redis-url", workers)
    try:
        assert spawn(workers, team, "carol", model, llm.api_base).exit_code == 0
        assert held.entered.wait(60)
        token = store.get("carol").turn_token
        assert token
        ran_out = cli("team", "shutdown", "carol", "--wait", "0.2", *base)
        assert ran_out.exit_code == 1, ran_out.output
        [record] = store.requests.all(pending_only=True)
        # Nobody answers: the record expires at its deadline, found by reading it (no timer).
        expired = store.requests.wait(record.id, 30)
        assert expired is not None and expired.status is RequestStatus.EXPIRED
        assert expired.resolved_by == "system" and expired.resolved_ms > expired.deadline_ms
        forced = cli("team", "shutdown", "carol", "--force", *base)
        assert forced.exit_code == 0, forced.output
        assert store.get("carol").status is TeammateStatus.SHUTDOWN
        # The revoked turn's late writes are refused.
        assert not store.turns.checkpoint("carol", token, "", [{"role": "user", "content": "late"}])
        assert store.turns.end_turn("carol", token, "done", "late") == "stale"
    finally:
        held.release.set()
    wait_until(lambda: workers_idle(workers), message="the revoked turn's job to finish")
    teammate = store.get("carol")
    assert teammate.status is TeammateStatus.SHUTDOWN and not teammate.turn_token
    assert all(m.get("content") != "late answer" for m in store.turns.memory("carol"))
    [notice] = store.messages.notices(SystemType.TEAMMATE_SHUTDOWN)
    assert notice.content == "carol shut down (forced by the lead)"
    assert store.messages.notices(SystemType.TEAMMATE_IDLE) == []
    # Resolving the expired record is refused as resolved (exit 1 class), changing nothing.
    with pytest.raises(RequestRefused, match="already expired"):
        store.requests.respond_shutdown("carol", record.id, True)
    assert cli("team", "shutdown", "carol", "--force", *base).exit_code == 1


def test_a_teammate_cannot_send_a_shutdown_request(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "bob", OFFLINE_MODEL, None).exit_code == 0
    model = llm.script(
        f"eve-{team}",
        [
            ToolCalls(
                [("send_message", {"to": "bob", "content": "stop now", "type": "shutdown_request"})]
            ),
            "gave up",
        ],
    )
    assert spawn(workers, team, "eve", model, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            all(m.status is TeammateStatus.IDLE for m in store.teammates())
            and len(store.teammates()) == 2
        ),
        message="eve and bob idle",
    )
    [result] = [m for m in store.turns.memory("eve") if m.get("role") == "tool"]
    assert "belongs to a protocol" in result["content"]
    assert "'peer.message'" in result["content"]
    assert all(m.type != ProtocolType.SHUTDOWN_REQUEST for m in store.bus.messages())
    assert store.requests.all() == []


def test_misused_request_ids_are_refused_and_change_nothing(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    base = ("-t", team, "--redis-url", redis_url)
    for name in ("alice", "bob"):  # nobody serves this queue: both stay working
        assert spawn(redis_url, team, name, OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    record, woke = store.requests.request_shutdown("alice", "done for today")
    assert not woke  # a working teammate sees it before its turn ends
    [request] = [m for m in store.messages.peek("alice")[1] if isinstance(m, ProtocolMessage)]
    assert (request.type, request.request_id, request.approve) == (
        ProtocolType.SHUTDOWN_REQUEST,
        record.id,
        None,
    )
    before = conn.hgetall(store.keys.request(record.id))
    with pytest.raises(ConfigError, match="unknown request req_000000000000"):
        store.requests.respond_shutdown("alice", "req_000000000000", True)
    with pytest.raises(ConfigError, match="invalid request id"):
        store.requests.respond_shutdown("alice", "../x", True)
    with pytest.raises(ConfigError, match="addressed to alice, not bob"):
        store.requests.respond_shutdown("bob", record.id, True)
    assert conn.hgetall(store.keys.request(record.id)) == before
    store.requests.respond_shutdown("alice", record.id, False, "not yet")
    resolved = conn.hgetall(store.keys.request(record.id))
    with pytest.raises(RequestRefused, match="already rejected") as refused:
        store.requests.respond_shutdown("alice", record.id, True)
    assert refused.value.exit_code == 1
    assert conn.hgetall(store.keys.request(record.id)) == resolved
    assert store.get("alice").shutdown_request is None
    # The CLI: an unknown request or teammate is bad input (2); a peer cannot pose as protocol.
    assert cli("team", "requests", "req_000000000000", *base).exit_code == 2
    shown = cli("team", "requests", record.id, "--json", *base)
    assert shown.exit_code == 0 and json.loads(shown.output)[0]["status"] == "rejected"
    assert cli("team", "shutdown", "carol", *base).exit_code == 2
    assert cli("team", "send", "alice", "x", "--type", "shutdown_response", *base).exit_code == 2


def test_an_approved_turn_ends_shut_down_with_mail_unread_and_a_respawn_gets_the_mail(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    # Nobody serves this queue: the test plays the turn through the store, as a worker would.
    assert spawn(redis_url, team, "dave", OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    verdict, token = store.turns.begin_turn("dave", "test:1")
    assert verdict == "ok"
    record, _ = store.requests.request_shutdown("dave")
    store.requests.respond_shutdown("dave", record.id, True)
    store.messages.send("lead", "dave", "one more thing")
    # Unread mail would continue the turn; an approved shutdown ends it instead.
    assert store.turns.end_turn("dave", token, "done", "dave is idle") == "shutdown"
    teammate = store.get("dave")
    assert teammate.status is TeammateStatus.SHUTDOWN and teammate.shutdown_request == record.id
    assert store.turns.begin_turn("dave", "test:2") == ("skip", "")
    unread = [m.content for m in store.messages.peek("dave")[1]]
    assert unread[-1] == "one more thing"
    # Spawned again, it works afresh with the mail that waited.
    assert spawn(redis_url, team, "dave", OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    teammate = store.get("dave")
    assert teammate.status is TeammateStatus.WORKING and teammate.shutdown_request is None
    assert [m.content for m in store.messages.peek("dave")[1]] == unread


def test_a_re_spawn_expires_a_pending_shutdown_request_and_its_answer_is_refused(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    assert spawn(redis_url, team, "sam", OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    old, _ = store.requests.request_shutdown("sam", "wrap up")
    verdict, token = store.turns.begin_turn("sam", "test:1")
    assert verdict == "ok" and store.turns.end_turn("sam", token, "done", "", force=True) == "idle"
    assert spawn(redis_url, team, "sam", OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    assert store.requests.get(old.id).status is RequestStatus.EXPIRED
    assert conn.smembers(store.keys.teammate_requests("sam")) == set()
    with pytest.raises(RequestRefused, match=f"request {old.id} is already expired"):
        store.requests.respond_shutdown("sam", old.id, True)
    # Pending, yet of an earlier life (an older version's record): refused, nothing written.
    conn.hset(store.keys.request(old.id), mapping={"status": "pending", "epoch": "1"})
    before = (conn.hgetall(store.keys.teammate("sam")), conn.xlen(store.keys.bus))
    with pytest.raises(
        RequestRefused,
        match=(
            f"request {old.id} is not sam's current shutdown request \\(sam was re-spawned "
            "since it was made, or it has none pending\\); nothing changed"
        ),
    ):
        store.requests.respond_shutdown("sam", old.id, True)
    assert (conn.hgetall(store.keys.teammate("sam")), conn.xlen(store.keys.bus)) == before
    assert store.get("sam").shutdown_request is None
    # Past its deadline as well: it ends expired, as any overdue request does.
    conn.hset(store.keys.request(old.id), "deadline_ms", 1)
    with pytest.raises(RequestRefused, match=f"request {old.id} is already expired"):
        store.requests.respond_shutdown("sam", old.id, True)
    assert store.requests.get(old.id).status is RequestStatus.EXPIRED
    current, _ = store.requests.request_shutdown("sam")
    assert store.requests.get(current.id).epoch == 2
    store.requests.respond_shutdown("sam", current.id, True)
    assert store.get("sam").shutdown_request == current.id
