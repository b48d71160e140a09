"""Persistent teammates: spawn, wake on mail, exactly-once memory, idle
notices, the CLI's exit codes. Real Redis, the session's real workers on `members`, the scripted
model server reached through litellm."""

from __future__ import annotations

import json
import multiprocessing
import time
import uuid
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from teamctl.coordinator.advice import for_this_shell
from teamctl.coordinator.local_workers.worker_hints import no_worker_hint
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.envelopes import SystemType
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import HttpError, ScriptedLLM, ToolCalls
from tests.support.teams import HeldFirstCall, cli, inbox_lines, spawn
from tests.support.waiting import wait_until

SENDERS = 4
MESSAGES_PER_SENDER = 25


def status_of(store: TeamStore, name: str) -> TeammateStatus:
    return store.get(name).status


def test_alice_messages_bob_who_answers_the_lead_and_both_go_idle(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    bob = llm.script(
        f"bob-{team}",
        [
            "ready",
            ToolCalls([("send_message", {"to": "lead", "content": "hello lead, alice says hi"})]),
            "done",
        ],
    )
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", {"to": "bob", "content": "hi bob"})]), "sent it"],
    )
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "bob", bob, llm.api_base).exit_code == 0
    # Bob's first turn ends before alice exists, so his wake-up turn is the one that answers.
    wait_until(lambda: status_of(store, "bob") is TeammateStatus.IDLE, message="bob's first turn")
    assert spawn(workers, team, "alice", alice, llm.api_base).exit_code == 0

    def settled() -> bool:
        idle = store.messages.notices(SystemType.TEAMMATE_IDLE)
        return len(idle) == 3 and all(m.status is TeammateStatus.IDLE for m in store.teammates())

    wait_until(settled, message="alice and bob idle after bob's answer")
    listed = json.loads(cli("team", "list", "--json", "-t", team, "--redis-url", workers).output)
    assert {(m["name"], m["status"], m["idle_reason"]) for m in listed} == {
        ("alice", "idle", "done"),
        ("bob", "idle", "done"),
    }
    shown = cli("team", "inbox", "--json", "-t", team, "--redis-url", workers).output
    lead = [json.loads(line) for line in shown.splitlines()]
    peer = [m for m in lead if m["type"] == "peer.message"]
    assert [(m["from"], m["content"]) for m in peer] == [("bob", "hello lead, alice says hi")]
    idle = [m for m in lead if m["type"] == SystemType.TEAMMATE_IDLE]
    assert sorted(m["content"].split()[0] for m in idle) == ["alice", "bob", "bob"]
    assert any("sent it" in m["content"] for m in idle)
    # The inbox is shown, never consumed.
    assert cli("team", "inbox", "--json", "-t", team, "--redis-url", workers).output == shown
    assert [m["content"] for m in inbox_lines(store.turns.memory("bob"))] == ["hi bob"]
    assert len(llm.requests[f"bob-{team}"]) == 3


def send_batch(url: str, team: str, sender: str, count: int) -> None:
    """A separate process: `count` numbered messages from `sender` to bob."""
    store = TeamStore(redis.Redis.from_url(url, decode_responses=True), team)
    for index in range(count):
        store.messages.send(sender, "bob", f"{sender}:{index}")


def test_mail_sent_mid_turn_by_four_processes_lands_in_memory_once_in_order(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    store = TeamStore(wconn, team)
    # A batch big enough for all of it: the mail reaches bob in one step.
    store.create(TeamOptions(inbox_batch_messages=SENDERS * MESSAGES_PER_SENDER))
    senders = [f"s{i}" for i in range(SENDERS)]
    for sender in senders:  # the offline model: one short turn each, then idle
        assert spawn(workers, team, sender, OFFLINE_MODEL, None).exit_code == 0
    wait_until(
        lambda: all(status_of(store, s) is TeammateStatus.IDLE for s in senders),
        message="the senders idle",
    )
    held = HeldFirstCall("first answer", "read them all")
    bob = llm.script(f"bob-{team}", handler=held)
    assert spawn(workers, team, "bob", bob, llm.api_base).exit_code == 0
    assert held.entered.wait(60)
    context = multiprocessing.get_context("spawn")
    processes = [
        context.Process(target=send_batch, args=(workers, team, s, MESSAGES_PER_SENDER))
        for s in senders
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    held.release.set()
    wait_until(lambda: status_of(store, "bob") is TeammateStatus.IDLE, message="bob idle")
    got = [m["content"] for m in inbox_lines(store.turns.memory("bob"))]
    assert len(got) == SENDERS * MESSAGES_PER_SENDER == len(set(got))
    for sender in senders:
        assert [c for c in got if c.startswith(f"{sender}:")] == [
            f"{sender}:{i}" for i in range(MESSAGES_PER_SENDER)
        ]
    # Mail to a working teammate woke nothing: one turn, one continue, two model calls.
    assert held.calls == 2
    assert Queue("members", connection=redis.Redis.from_url(workers)).count == 0
    assert store.messages.peek("bob")[1] == []


def test_ten_idle_teammates_cost_nothing(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    model = llm.script(f"idle-{team}", ["resting"], repeat_last=True)
    store = TeamStore(wconn, team)
    names = [f"m{i}" for i in range(10)]
    for name in names:
        assert spawn(workers, team, name, model, llm.api_base).exit_code == 0
    wait_until(
        lambda: (
            all(m.status is TeammateStatus.IDLE for m in store.teammates())
            and len(store.teammates()) == 10
        ),
        60,
        message="ten idle teammates",
    )
    queue = Queue("members", connection=redis.Redis.from_url(workers))

    def workers_idle() -> bool:
        return queue.count == 0 and all(w.get_state() != "busy" for w in Worker.all(queue=queue))

    # The last turn's job still reconciles and reports to RQ after its teammate went idle.
    wait_until(workers_idle, 30, message="the last turn's job to finish")
    seen = {m.name: m.last_seen_ms for m in store.teammates()}
    assert len(llm.requests[f"idle-{team}"]) == 10
    # An observation window: nothing may happen in it, so there is no condition to wait for.
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert workers_idle()
        assert len(llm.requests[f"idle-{team}"]) == 10
        time.sleep(0.1)
    assert {m.name: m.last_seen_ms for m in store.teammates()} == seen
    assert store.scheduler.reconcile() == []


def test_an_offline_teammate_answers_and_goes_idle(
    workers: str, wconn: redis.Redis, team: str
) -> None:
    store = TeamStore(wconn, team)
    result = cli(
        "team",
        "spawn",
        "scout",
        "-t",
        team,
        "--redis-url",
        workers,
        "--role",
        "scout",
        "--prompt",
        "Look around.",
    )
    assert result.exit_code == 0, result.output
    assert "teamctl-offline" in result.output
    wait_until(lambda: status_of(store, "scout") is TeammateStatus.IDLE, message="scout idle")
    [notice] = store.messages.notices(SystemType.TEAMMATE_IDLE)
    assert notice.content.startswith("scout is idle (done): [scout] scout: noted")
    assert cli("teams", "--json", "--redis-url", workers).exit_code == 0
    assert team in cli("teams", "--redis-url", workers).output


@pytest.mark.worker_failures_expected("the worker logs the failed turn with its traceback")
def test_a_failing_model_idles_the_teammate_with_the_error(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    model = llm.script(f"broken-{team}", [HttpError(400, "bad request from the provider")])
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "alice", model, llm.api_base).exit_code == 0
    wait_until(lambda: status_of(store, "alice") is TeammateStatus.IDLE, message="alice idle")
    teammate = store.get("alice")
    assert teammate.idle_reason and teammate.idle_reason.startswith("error: ")
    assert teammate.last_error and "bad request from the provider" in teammate.last_error
    [notice] = store.messages.notices(SystemType.TEAMMATE_IDLE)
    assert notice.content.startswith("alice is idle (error: ")
    # The next message wakes it again, and the error is cleared by a good turn.
    llm.script(f"broken-{team}", ["better now"])
    assert (
        cli("team", "send", "alice", "try again", "-t", team, "--redis-url", workers).exit_code == 0
    )
    wait_until(
        lambda: len(store.messages.notices(SystemType.TEAMMATE_IDLE)) == 2, message="second turn"
    )
    assert store.get("alice").last_error is None


@pytest.mark.parametrize("name", ["../x", "a/b", "Alice", "lead", "system", "x" * 33, "9x"])
def test_bad_teammate_names_exit_2_and_touch_no_key(
    redis_url: str, conn: redis.Redis, name: str
) -> None:
    result = spawn(redis_url, "crew", name, OFFLINE_MODEL, None)
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "teamctl:" in result.output
    assert conn.keys("teamctl:team:*") == []


def test_bad_team_names_exit_2(redis_url: str) -> None:
    for team in ("../x", "Crew", "a b"):
        assert spawn(redis_url, team, "alice", OFFLINE_MODEL, None).exit_code == 2


def test_respawning_a_working_teammate_exits_1_and_unknown_ones_exit_2(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    TeamStore(conn, team).create(TeamOptions(max_message_bytes=64))
    # Nobody serves this queue: alice stays working.
    base = ("-t", team, "--redis-url", redis_url)
    assert cli("team", "list", *base).stdout == f"no teammates in team {team} yet\n"
    assert spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--queue", "nobody").exit_code == 0
    again = spawn(redis_url, team, "alice", OFFLINE_MODEL, None, "--queue", "nobody")
    assert again.exit_code == 1
    assert "alice is working; wait for idle or shut it down" in again.output
    unknown = cli("team", "send", "carol", "hi", *base)
    assert unknown.exit_code == 2 and "unknown teammate 'carol'" in unknown.output
    assert cli("team", "inbox", "carol", *base).exit_code == 2
    assert cli("team", "send", "alice", "x" * 100, *base).exit_code == 2
    assert cli("team", "send", "alice", "short", *base).exit_code == 0
    assert cli("team", "list", "-t", "nosuch", "--redis-url", redis_url).exit_code == 2
    # Piped: a tab-separated row each, no header (a terminal gets one: test_listings.py).
    assert cli("team", "list", *base).stdout == "alice\tworking\talice-role\t-\n"
    assert cli("teams", "--redis-url", redis_url).stdout == (
        f"{team}\t1\t1\t0 tokens\tunpriced\t-\n"
    )
    refused = cli("team", "delete", *base)
    assert refused.exit_code == 1 and "working" in refused.output
    assert cli("team", "delete", "--force", *base).exit_code == 0
    assert conn.keys(f"teamctl:team:{{{team}}}:*") == []
    gone = cli("teams", "--redis-url", redis_url)  # stderr is no terminal here: stdout
    assert (gone.exit_code, gone.stdout) == (0, "no teams yet\n")
    assert cli("teams", "--json", "--redis-url", redis_url).stdout == "[]\n"


def test_spawn_says_when_no_worker_listens_on_the_queue(workers: str, team: str) -> None:
    served = spawn(workers, team, "alice", OFFLINE_MODEL, None)
    assert served.exit_code == 0 and "no worker listens" not in served.stderr
    queue = f"q-{uuid.uuid4().hex[:8]}"
    waiting = spawn(workers, team, "bob", OFFLINE_MODEL, None, "--queue", queue)
    assert waiting.exit_code == 0
    hint = for_this_shell(workers).spell(no_worker_hint(queue, "its turn"))
    assert waiting.stderr == f"teamctl: {hint}\n"
    store = TeamStore(redis.Redis.from_url(workers, decode_responses=True), team)
    wait_until(lambda: store.get("alice").status is TeammateStatus.IDLE, message="alice idle")
    store.delete(force=True)


def test_team_create_takes_its_options_from_the_team_files_teammates_table(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    good = tmp_path / "team.toml"
    good.write_text(
        '[[members]]\nid = "m1"\n[teammates]\nmax_teammates = 2\nheartbeat_ttl_s = 12\n'
    )
    created = cli("team", "create", "--file", str(good), "-t", team, "--redis-url", redis_url)
    assert created.exit_code == 0, created.output
    options = TeamStore(conn, team).options
    assert (options.max_teammates, options.heartbeat_ttl_s) == (2, 12.0)
    again = cli("team", "create", "-t", team, "--redis-url", redis_url)
    assert again.exit_code == 1 and "exists; its options are kept" in again.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[teammates]\nmax_teamates = 2\n")
    other = f"t{uuid.uuid4().hex[:10]}"
    refused = cli("team", "create", "--file", str(bad), "-t", other, "--redis-url", redis_url)
    assert refused.exit_code == 2 and "teammates.max_teamates: unknown field" in refused.stderr
    assert not TeamStore(conn, other).exists()


@pytest.mark.parametrize(
    ("teammates", "message"),
    [
        (
            'grantable_mcp = ["gti"]',
            "[teammates] grantable_mcp: mcp entry 'gti' names no [[mcp_servers]] entry (git); add "
            "the "
            "server or fix the name",
        ),
        (
            'grantable_tools = ["nope.mod:search"]',
            "[teammates] grantable_tools: tool 'nope.mod:search': cannot import nope.mod",
        ),
        (
            'grantable_tools = ["shell"]',
            "teammates.grantable_tools: Value error, unknown tool 'shell'; list workspace tools",
        ),
        (
            'grantable_models = [" "]',
            "teammates.grantable_models: Value error, a model is a non-empty name",
        ),
    ],
)
def test_team_create_refuses_grants_that_name_nothing(
    redis_url: str, team: str, tmp_path: Path, teammates: str, message: str
) -> None:
    """What the lead may grant must exist when the team is created: exit 2 naming the field,
    and no team."""
    path = tmp_path / "team.toml"
    path.write_text(
        f'[[mcp_servers]]\nname = "git"\nurl = "http://127.0.0.1:9/mcp"\n[teammates]\n{teammates}\n'
    )
    refused = cli("team", "create", "--file", str(path), "-t", team, "--redis-url", redis_url)
    assert refused.exit_code == 2, refused.output
    assert message in refused.stderr
    assert not TeamStore(redis.Redis.from_url(redis_url), team).exists()


def test_team_create_keeps_the_grants_a_person_lists(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    path = tmp_path / "team.toml"
    path.write_text(
        '[[mcp_servers]]\nname = "git"\nurl = "http://127.0.0.1:9/mcp"\n[teammates]\n'
        'grantable_tools = ["read_file", "bash", '
        '"tests.pytools_fixture.tools:search_docs"]\n'
        'grantable_mcp = ["git:git_log"]\ngrantable_models = ["gpt-x"]\n'
    )
    created = cli("team", "create", "--file", str(path), "-t", team, "--redis-url", redis_url)
    assert created.exit_code == 0, created.output
    options = TeamStore(conn, team).options
    assert (options.grantable_tools, options.grantable_mcp, options.grantable_models) == (
        ["read_file", "bash", "tests.pytools_fixture.tools:search_docs"],
        ["git:git_log"],
        ["gpt-x"],
    )
    assert TeamOptions().grantable_tools == ["read_file", "write_file", "edit_file", "list_files"]
    assert (TeamOptions().grantable_mcp, TeamOptions().grantable_models) == ([], [])
