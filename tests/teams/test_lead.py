"""The lead agent of a persistent team, `teamctl lead`: a scripted lead
spawns a teammate whose reply reaches it once, a second lead is refused naming the holder, a
SIGKILLed lead restarts where it stopped with each response injected once, and the slash
commands make no model call. Real Redis, the session's real workers on `members`, the scripted
model server through litellm."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue, Worker
from rq.job import Job
from teamctl.coordinator.teams.lead import LeadMemory
from teamctl.coordinator.teams.repl import Watcher
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.bus import LEAD
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import ProtocolType, SystemType
from teamctl.shared.errors import RunFailed
from teamctl.shared.keys import TeamKeys
from teamctl.shared.lease import LeadLease
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import RequestStatus, TeammateStatus

from tests.support.cli import TEAMCTL
from tests.support.llm import ScriptedLLM, Slow, ToolCalls
from tests.support.teams import cli, lead_args, spawn, typed
from tests.support.timescale import scaled
from tests.support.waiting import wait_until

TTL_S = scaled(TeamOptions().heartbeat_ttl_s, floor_s=1.5)
_INBOX = re.compile(r"<inbox>\n(.*?)\n</inbox>", re.S)


def injected(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every message injected through `<inbox>` blocks into user messages, in order (the lead
    appends its block to the person's text)."""
    found = []
    for message in messages:
        if message.get("role") == "user":
            for block in _INBOX.findall(message.get("content") or ""):
                found += [json.loads(line) for line in block.splitlines()]
    return found


def lead_memory(conn: redis.Redis, team: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in conn.lrange(TeamKeys(team).lead_memory, 0, -1)]


class LeadScript:
    """The lead's model: spawn alice on the first call, then a short answer to every call."""

    def __init__(self, alice_model: str) -> None:
        self.alice_model = alice_model
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.calls += 1
        if self.calls == 1:
            return ToolCalls(
                [
                    (
                        "spawn_teammate",
                        {
                            "name": "alice",
                            "role": "researcher",
                            "prompt": "Find it, tell the lead.",
                            "model": self.alice_model,
                        },
                    )
                ]
            )
        return f"noted ({self.calls})"


def test_a_scripted_lead_spawns_alice_and_until_idle_ends_with_her_reply_injected_once(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", {"to": "lead", "content": "found it: 42"})]), "done"],
    )
    script = LeadScript(alice)
    lead = llm.script(f"lead-{team}", handler=script)
    store = TeamStore(wconn, team)
    store.create(TeamOptions(grantable_models=[alice]))  # alice's model is not the lead's
    result = cli(
        *lead_args(workers, team, lead, llm.api_base, "-m", "Spawn alice.", "--until-idle")
    )
    assert result.exit_code == 0, result.output
    assert store.get("alice").status is TeammateStatus.IDLE
    # The inbox is handled: its offset moved past every mail.
    assert store.messages.peek(LEAD)[1] == []

    memory = lead_memory(wconn, team)
    assert memory[0] == {"role": "user", "content": "Spawn alice."}
    spawned = json.loads(memory[2]["content"])
    assert list(spawned)[:2] == ["action", "ok"] and spawned["ok"] is True
    assert (spawned["name"], spawned["status"]) == ("alice", "working")
    # Her reply and her idle notice each reached the lead's model once, and its memory once.
    replies = [m for m in injected(memory) if m["content"] == "found it: 42"]
    assert [(m["from"], m["type"]) for m in replies] == [("alice", "peer.message")]
    ids = [m["id"] for m in injected(memory)]
    assert len(ids) == len(set(ids)) == 2
    assert {m["type"] for m in injected(memory)} == {"peer.message", SystemType.TEAMMATE_IDLE}
    last = llm.requests[f"lead-{team}"][-1]["messages"]
    assert [m["id"] for m in injected(last)] == ids
    # No invented exchange: the person's text, or mail alone, and every answer the model's own.
    assert all(
        m["content"] == "Spawn alice." or m["content"].startswith("<inbox>")
        for m in memory
        if m["role"] == "user"
    )
    assert all(
        m.get("tool_calls") or m["content"].startswith("noted")
        for m in memory
        if m["role"] == "assistant"
    )
    assert result.stdout.splitlines()[0] == "noted (2)"
    assert "teamctl lead: spawn_teammate: ok" in result.stderr

    # --new forgets the conversation; the mail already handled is not replayed.
    again = cli(*lead_args(workers, team, lead, llm.api_base, "--new", "-m", "Start over."))
    assert again.exit_code == 0, again.output
    assert [m["role"] for m in llm.requests[f"lead-{team}"][-1]["messages"]] == ["system", "user"]
    assert lead_memory(wconn, team)[0] == {"role": "user", "content": "Start over."}


class Reader:
    """Alice's model: read brief.md, tell the lead what it says, then rest."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.calls += 1
        if self.calls == 1:
            return ToolCalls([("read_file", {"path": "brief.md"})])
        if self.calls == 2:
            read = json.loads(body["messages"][-1]["content"])
            return ToolCalls([("send_message", {"to": "lead", "content": read["content"]})])
        return "done"


def test_the_lead_has_the_workspace_tools_the_team_lists_and_shares_the_workspace(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str, tmp_path: Path
) -> None:
    store = TeamStore(wconn, team)
    alice = llm.script(f"alice-{team}", handler=Reader())
    store.create(TeamOptions(lead_tools=["write_file"], grantable_models=[alice]))
    lead = llm.script(
        f"lead-{team}",
        [
            ToolCalls(
                [
                    ("write_file", {"path": "brief.md", "content": "the plan: 42"}),
                    (
                        "spawn_teammate",
                        {
                            "name": "alice",
                            "role": "reader",
                            "model": alice,
                            "prompt": "Read brief.md to the lead.",
                            "tools": ["read_file"],
                        },
                    ),
                ]
            ),
            "brief written",
        ],
        repeat_last=True,
    )
    result = cli(
        *lead_args(workers, team, lead, llm.api_base, "-m", "Brief alice.", "--until-idle")
    )
    assert result.exit_code == 0, result.output
    sent = llm.requests[f"lead-{team}"][0]["tools"]
    assert [t["function"]["name"] for t in sent] == [
        "spawn_teammate",
        "list_teammates",
        "send_message",
        "broadcast",
        "read_inbox",
        "request_shutdown",
        "review_plan",
        "create_task",
        "list_tasks",
        "get_task",
        "write_file",
    ]  # bash only if the team lists it
    assert store.get("alice").tools == ["read_file"]
    assert (tmp_path / "state" / "teams" / team / "workspace" / "brief.md").read_text() == (
        "the plan: 42"
    )
    told = [m for m in injected(lead_memory(wconn, team)) if m["from"] == "alice"]
    assert [m["content"] for m in told if m["type"] == "peer.message"] == ["the plan: 42"]


@pytest.mark.realistic
def test_the_lead_at_the_defaults_with_slow_models_and_its_own_workers(
    redis_url: str, conn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    slow = {"latency_s": scaled(7), "latency_seed": 12}  # 3.5-10.5 s a call at 1x
    alice = llm.script(
        f"alice-{team}",
        [ToolCalls([("send_message", {"to": "lead", "content": "found it: 42"})]), "done"],
        **slow,
    )
    lead = llm.script(f"lead-{team}", handler=LeadScript(alice), **slow)
    store = TeamStore(conn, team)
    store.create(TeamOptions(grantable_models=[alice]))  # the defaults, and alice's model
    # The default --workers (2): the lead's own preloaded workers play alice's turns.
    result = cli(
        *lead_args(
            redis_url,
            team,
            lead,
            llm.api_base,
            "-m",
            "Spawn alice.",
            "--until-idle",
            own_workers=True,
        )
    )
    assert result.exit_code == 0, result.output
    alice_now = store.get("alice")
    # The slow calls never let a turn lease lapse: no rerun, no error.
    assert (alice_now.status, alice_now.attempts, alice_now.last_error) == (
        TeammateStatus.IDLE,
        0,
        None,
    )
    memory = lead_memory(conn, team)
    assert [m["content"] for m in injected(memory) if m["from"] == "alice"] == ["found it: 42"]
    assert store.messages.peek(LEAD)[1] == []
    # Quitting released the lease and stopped the workers it started.
    assert not conn.exists(TeamKeys(team).lead_lease)
    rq_conn = redis.Redis.from_url(redis_url)
    assert Worker.all(queue=Queue("members", connection=rq_conn)) == []


def test_the_lead_puts_a_task_on_the_board_for_an_idle_teammate_that_fits(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    bob = llm.script(
        f"bob-{team}",
        [
            "ready",
            ToolCalls([("complete_task", {"task_id": "task_1", "result": "summary done"})]),
            "done",
        ],
    )
    lead = llm.script(
        f"lead-{team}",
        [
            ToolCalls([("create_task", {"subject": "Write the summary", "role": "writer"})]),
            "on the board",
        ],
        repeat_last=True,
    )
    store = TeamStore(wconn, team)
    store.spawn(
        "bob", role="writer", prompt="Start.", model=bob, api_base=llm.api_base, queue="members"
    )
    # Idle too, but not of the task's role: never handed the task.
    store.spawn(
        "carol", role="reader", prompt="Start.", model=OFFLINE_MODEL, api_base=None, queue="members"
    )
    wait_until(
        lambda: all(m.status is TeammateStatus.IDLE for m in store.teammates()),
        message="bob and carol idle",
    )
    result = cli(
        *lead_args(
            workers, team, lead, llm.api_base, "-m", "Get the summary written.", "--until-idle"
        )
    )
    assert result.exit_code == 0, result.output
    created = json.loads(lead_memory(wconn, team)[2]["content"])
    assert (created["action"], created["ok"], created["task_id"]) == ("create_task", True, "task_1")
    [task] = TeamTasks(store).snapshot()
    assert (task.status, task.claimed_by, task.output) == (
        TaskStatus.COMPLETED,
        "bob",
        "summary done",
    )
    shown = typed(*lead_args(workers, team, lead, llm.api_base), lines="/tasks\n/quit\n")
    assert "task_1\tcompleted\t-\twriter\t-\tWrite the summary" in shown.stdout


def test_the_offline_lead_answers_without_a_key(
    workers: str, wconn: redis.Redis, team: str
) -> None:
    assert spawn(workers, team, "scout", OFFLINE_MODEL, None).exit_code == 0
    result = cli(
        "lead",
        "-t",
        team,
        "--redis-url",
        workers,
        "--workers",
        "0",
        "-m",
        "status?",
        "--until-idle",
    )
    assert result.exit_code == 0, result.output
    assert "using the built-in offline model" in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"[lead of {team}] noted 'status?'")
    # The scout's idle notice reached the lead (in the -m turn or a turn of its own).
    assert [m["type"] for m in injected(lead_memory(wconn, team))] == [SystemType.TEAMMATE_IDLE]
    assert TeamStore(wconn, team).get("scout").status is TeammateStatus.IDLE


def test_a_second_lead_exits_2_naming_the_holder_and_calls_no_model(
    redis_url: str, conn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    lead = llm.script(f"lead-{team}", [])
    TeamStore(conn, team).create()
    holder = LeadLease(conn, TeamKeys(team), 30)
    holder.acquire()
    try:
        refused = cli(*lead_args(redis_url, team, lead, llm.api_base, "-m", "hello"))
        assert refused.exit_code == 2
        assert f"team {team} is led by {holder.owner}" in refused.stderr
        assert refused.stderr.count("\n") == 1
    finally:
        holder.release()
    assert llm.requests[f"lead-{team}"] == []


def test_slash_commands_show_the_team_without_a_model_call(
    redis_url: str, conn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    lead = llm.script(f"lead-{team}", [])
    store = TeamStore(conn, team)
    ttl_s = max(TTL_S, 3.0)  # the first /team comes well within it, even on a busy host
    store.create(TeamOptions(heartbeat_ttl_s=ttl_s))
    # Nobody serves this queue: alice stays working, her turn never taken, and once a lease TTL
    # passed unseen she is stalled.
    store.spawn(
        "alice", role="researcher", prompt="Start.", model=lead, api_base=None, queue="nobody"
    )
    assert (
        "working\t-\t"
        in typed(*lead_args(redis_url, team, lead, llm.api_base), lines="/team\n").stdout
    )
    wait_until(
        lambda: now_ms() - store.get("alice").last_seen_ms > ttl_s * 1000,
        message="a lease TTL without alice being seen",
    )
    store.messages.send("alice", LEAD, "a question for the lead")
    record, _ = store.requests.request_shutdown("alice", "wrapping up")
    shown = typed(
        *lead_args(redis_url, team, lead, llm.api_base),
        lines="/team\n/inbox\n/requests\n/tasks\n/help\n/bogus\n/quit\n",
    )
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    assert "alice\tresearcher\tworking\tstalled\t-\t1 unread" in out
    assert "alice -> lead\tpeer.message\ta question for the lead" in out
    assert f"{record.id}\tshutdown\tlead\talice\tpending\twrapping up" in out
    assert "(no tasks)" in out and "/requests" in out
    assert "unknown command /bogus; /help lists them" in shown.stderr
    assert llm.requests[f"lead-{team}"] == []
    # Shown, not consumed: the agent still gets the mail.
    assert [m.content for m in store.messages.peek(LEAD)[1]] == ["a question for the lead"]


class KilledLead:
    """The lead's model across a SIGKILL: ask bob to shut down, then take longer than the test
    lets the process live (the wait is spent outside the server's lock, so other models go on);
    after the restart, approve alice's plan, then answer."""

    def __init__(self, hang_s: float) -> None:
        self.hang_s = hang_s
        self.calls = 0
        self.hung = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls | Slow:
        self.calls += 1
        if self.calls == 1:
            return ToolCalls([("request_shutdown", {"name": "bob", "reason": "done for today"})])
        if self.calls == 2:
            self.hung.set()
            return Slow("an answer nobody reads", self.hang_s)
        if self.calls == 3:
            plan = next(
                m
                for m in injected(body["messages"])
                if m["type"] == ProtocolType.PLAN_APPROVAL_REQUEST
            )
            return ToolCalls([("review_plan", {"request_id": plan["request_id"], "approve": True})])
        return "bob is gone, alice has her plan approved"


class Bob:
    """Ready at first; asked to shut down, approves, taking `answer_s` to say so (time for the
    test to kill the lead with the request still pending)."""

    def __init__(self, answer_s: float) -> None:
        self.answer_s = answer_s
        self.asked = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | Slow:
        found = re.findall(
            r'\\"request_id\\": \\"(req_[0-9a-f]{12})\\"', json.dumps(body["messages"])
        )
        if not found:
            return "ready"
        self.asked.set()
        return Slow(
            ToolCalls([("respond_shutdown", {"request_id": found[-1], "approve": True})]),
            self.answer_s,
        )


@pytest.mark.realistic  # at 1x: the default 30 s lead lease, model calls of 3.5-10.5 s
def test_a_killed_lead_restarts_where_it_stopped_with_each_response_injected_once(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str, tmp_path: Path
) -> None:
    store = TeamStore(wconn, team)
    store.create(TeamOptions(heartbeat_ttl_s=TTL_S))
    slow = {"latency_s": scaled(7), "latency_seed": 13}
    turn_s = scaled(30, floor_s=30)  # a turn of two slow calls, plus a fork on a busy host
    bob = Bob(answer_s=scaled(7, floor_s=3))
    bob_model = llm.script(f"bob-{team}", handler=bob, **slow)
    alice_model = llm.script(
        f"alice-{team}",
        [
            ToolCalls([("submit_plan", {"plan": "1. read 2. write"})]),
            "waiting for review",
            "carrying it out",
        ],
        **slow,
    )
    script = KilledLead(hang_s=3 * turn_s)
    lead = llm.script(f"lead-{team}", handler=script, **slow)
    store.spawn(
        "bob",
        role="builder",
        prompt="Build.",
        model=bob_model,
        api_base=llm.api_base,
        queue="members",
    )
    wait_until(
        lambda: store.get("bob").status is TeammateStatus.IDLE, turn_s, message="bob's first turn"
    )

    logs = tmp_path / "lead1.log"
    with logs.open("wb") as log:
        first = subprocess.Popen(
            [
                *TEAMCTL,
                *lead_args(workers, team, lead, llm.api_base, "-m", "Ask bob to shut down."),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert script.hung.wait(3 * turn_s), logs.read_text()
        assert bob.asked.wait(turn_s)
        [pending] = store.requests.all()
        assert (pending.kind, pending.to, pending.status) == (
            "shutdown",
            "bob",
            RequestStatus.PENDING,
        )
        # The first step is committed; the hung second one is not.
        assert [m["role"] for m in lead_memory(wconn, team)] == ["user", "assistant", "tool"]
        refused = cli(*lead_args(workers, team, lead, llm.api_base, "-m", "me too"))
        assert refused.exit_code == 2 and f":{first.pid}:" in refused.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()

    # While the lead is dead: bob answers (approves, shuts down), alice asks for a plan review.
    store.spawn(
        "alice",
        role="writer",
        prompt="Write.",
        model=alice_model,
        api_base=llm.api_base,
        queue="members",
        plan_mode=True,
    )
    wait_until(
        lambda: (
            store.get("bob").status is TeammateStatus.SHUTDOWN
            and store.get("alice").status is TeammateStatus.IDLE
        ),
        3 * turn_s,
        message="bob and alice settle",
    )
    [_, plan] = store.requests.all()
    wait_until(
        lambda: not wconn.exists(TeamKeys(team).lead_lease),
        3 * TTL_S + 5,
        message="the dead lead's lease to expire",
    )

    restarted = typed(*lead_args(workers, team, lead, llm.api_base), lines="/requests\n\n/quit\n")
    assert restarted.exit_code == 0, restarted.output
    assert f"{pending.id}\tshutdown\tlead\tbob\tapproved" in restarted.stdout
    assert f"{plan.id}\tplan_approval\talice\tlead\tpending" in restarted.stdout
    assert "bob is gone, alice has her plan approved" in restarted.stdout
    assert script.calls == 4

    # The conversation went on from the first lead's committed step.
    requests = llm.requests[f"lead-{team}"]
    resumed = requests[2]["messages"]
    assert resumed[1]["content"].startswith("Ask bob to shut down.")
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool", "user"]
    assert "an answer nobody reads" not in json.dumps(requests[3]["messages"])
    # Each response reached the model once: in one request's inbox, never again after.
    final = injected(requests[3]["messages"])
    ids = [m["id"] for m in final]
    assert len(ids) == len(set(ids))
    types = [m["type"] for m in final]
    assert types.count(ProtocolType.SHUTDOWN_RESPONSE) == 1
    assert types.count(ProtocolType.PLAN_APPROVAL_REQUEST) == 1
    assert types.count(SystemType.TEAMMATE_SHUTDOWN) == 1
    assert injected(lead_memory(wconn, team)) == final
    assert store.requests.get(plan.id).status is RequestStatus.APPROVED
    wait_until(
        lambda: (
            store.get("alice").status is TeammateStatus.IDLE
            and store.get("alice").plan_state == "approved"
        ),
        turn_s,
        message="alice carries it out",
    )


def test_the_watcher_announces_mail_to_the_lead_and_reconciles_the_team(
    redis_url: str, conn: redis.Redis, team: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(heartbeat_ttl_s=TTL_S))
    # Nobody serves this queue, and alice's turn job is lost: she stays working without a turn
    # lease or a queued job, i.e. stalled (a job still queued would be waiting, not stalled).
    store.spawn(
        "alice",
        role="researcher",
        prompt="Start.",
        model=OFFLINE_MODEL,
        api_base=None,
        queue="nobody",
    )
    Job.fetch(str(store.get("alice").job_id), connection=redis.Redis.from_url(redis_url)).delete()
    store.spawn(
        "bob", role="builder", prompt="Start.", model=OFFLINE_MODEL, api_base=None, queue="nobody"
    )
    said: list[str] = []

    def announced(text: str) -> bool:
        said.append(capsys.readouterr().err)
        return text in "".join(said)

    with Watcher(store, TTL_S / 3):
        store.messages.send("alice", LEAD, "a question")
        store.messages.broadcast("bob", "news for all")
        store.messages.send(LEAD, "alice", "an answer")
        wait_until(lambda: announced("news for all"), message="the broadcast announced")
        # No team verb runs: the watcher's own reconcile reruns alice's stalled turn.
        wait_until(
            lambda: store.get("alice").attempts >= 1,
            3 * TTL_S + 5,
            message="the lead's watcher to reconcile alice",
        )
    err = "".join(said)
    assert "teamctl lead: [inbox] " in err and "alice -> lead\tpeer.message\ta question" in err
    assert "bob -> *\tpeer.broadcast\tnews for all" in err
    assert "an answer" not in err  # the lead's own mail is not its arrival


def test_a_lead_that_lost_its_lease_commits_nothing(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create()
    keys = TeamKeys(team)
    conn.set(keys.lead_lease, "host:2:bbbbbb")  # another lead took over
    step = [{"role": "user", "content": "late"}, {"role": "assistant", "content": "too late"}]
    with pytest.raises(RunFailed, match="lost its lease"):
        LeadMemory(store, "host:1:aaaaaa").commit("1-1", step)
    assert conn.llen(keys.lead_memory) == 0 and conn.hget(keys.read_offsets, LEAD) is None
    LeadMemory(store, "host:2:bbbbbb").commit("1-1", step)
    assert lead_memory(conn, team) == step and conn.hget(keys.read_offsets, LEAD) == "1-1"


def test_the_leads_memory_keeps_whole_exchanges_under_its_cap(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    store = TeamStore(conn, team)
    store.create(TeamOptions(memory_max_messages=4))
    conn.set(TeamKeys(team).lead_lease, "host:1:aaaaaa")
    memory = LeadMemory(store, "host:1:aaaaaa")
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "list_teammates", "arguments": "{}"},
    }
    for turn in range(3):
        memory.commit(
            "",
            [
                {"role": "user", "content": f"turn {turn}"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": "{}"},
            ],
        )
    # Past the cap the oldest exchanges go, cut before a user message: no call loses its result.
    assert [m["content"] for m in memory.load() if m["role"] == "user"] == ["turn 2"]
    memory.start_over()
    assert memory.load() == []
