"""Teammates' workspace tools and plan gate, and delivery under load:
`team spawn --tool T`, the team's shared workspace, write_file refused in plan mode until the
lead approves, mail from four processes mid-turn and 500 sends landing as turns end. Real
Redis, the session's real workers on `members`, the scripted model server through litellm."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.envelopes import SystemType
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.worker.teams.teammate_workspace import add_teammate_workspace

from tests.support.llm import Reply, ScriptedLLM, ToolCalls
from tests.support.teams import cli, inbox_lines, spawn
from tests.support.waiting import wait_until

TEAM_TOOLS = [
    "send_message",
    "broadcast",
    "read_inbox",
    "list_teammates",
    "respond_shutdown",
    "submit_plan",
    "list_tasks",
    "get_task",
    "claim_task",
    "complete_task",
    "idle",
]
SENDERS = 4
MESSAGES_PER_SENDER = 200
SENDER_CODE = """
import sys, redis
from teamctl.shared.teams.team_store import TeamStore
url, team, tag, count = sys.argv[1:5]
store = TeamStore(redis.Redis.from_url(url, decode_responses=True), team)
for index in range(int(count)):
    store.messages.send("lead", "bob", f"{tag}:{index}")
"""
TURN_END_SENDS = 500
TURN_END_LATENCY_S = 0.03
"""Each model call of the turn-end test takes this long, so two calls in flight at once would
arrive closer together than this."""
SEND_OFFSETS_S = (-0.02, -0.005, 0.0, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05)
"""When a burst is sent, relative to when the model call it follows returns (its turn's end)."""
BURST_SIZES = (1, 2, 3)


def idle_notices(store: TeamStore) -> int:
    return len(store.messages.notices(SystemType.TEAMMATE_IDLE))


def tool_results(store: TeamStore, name: str) -> list[str]:
    """The content of every tool result in the teammate's memory, in order."""
    return [m["content"] for m in store.turns.memory(name) if m.get("role") == "tool"]


def offered(llm: ScriptedLLM, model: str) -> list[list[str]]:
    """The tool names of each request the model got."""
    return [
        [t["function"]["name"] for t in body.get("tools", [])]
        for body in llm.requests[model.removeprefix("openai/")]
    ]


def test_plan_mode_refuses_write_file_until_approval_even_after_a_rejection(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks

    def write(content: str) -> ToolCalls:
        return ToolCalls([("write_file", {"path": "notes/plan.md", "content": content})])

    model = llm.script(
        f"pat-{team}",
        [
            write("too early"),
            ToolCalls([("submit_plan", {"plan": "v1: write notes/plan.md"})]),
            write("still waiting"),
            "waiting for review",
            write("after a rejection"),
            ToolCalls([("submit_plan", {"plan": "v2: with a title"})]),
            "waiting again",
            write("# Plan\n"),
            "written",
        ],
    )
    store = TeamStore(wconn, team)
    base = ("-t", team, "--redis-url", workers)
    workspace = tmp_path / "state" / "teams" / team / "workspace"
    assert (
        spawn(
            workers, team, "pat", model, llm.api_base, "--plan-mode", "--tool", "write_file"
        ).exit_code
        == 0
    )
    assert store.get("pat").workspace == str(workspace)
    target = workspace / "notes" / "plan.md"
    wait_until(lambda: idle_notices(store) == 1, message="pat's plan submitted")
    refused = tool_results(store, "pat")
    assert len(refused) == 3
    for result in (refused[0], refused[2]):
        error = json.loads(result.removeprefix("TOOL_ERROR: "))
        assert (error["errorType"], error["tool"]) == ("PlanNotApproved", "write_file")
        assert "plan_approval_response" in error["error"]
    assert "call submit_plan" in refused[0] and "waiting for the lead's review" in refused[2]
    assert not target.exists()
    [first] = store.requests.all()
    assert (
        cli("team", "review", first.id, "--reject", "--feedback", "add a title", *base).exit_code
        == 0
    )
    wait_until(lambda: idle_notices(store) == 2, message="pat's revised plan")
    after_rejection = tool_results(store, "pat")[3]
    assert after_rejection.startswith("TOOL_ERROR: ") and "call submit_plan" in after_rejection
    assert not target.exists()
    [_, second] = store.requests.all()
    assert cli("team", "review", second.id, "--approve", *base).exit_code == 0
    wait_until(lambda: idle_notices(store) == 3, message="pat carrying out its plan")
    written = json.loads(tool_results(store, "pat")[-1])
    assert (written["action"], written["ok"], written["path"]) == (
        "write_file",
        True,
        "notes/plan.md",
    )
    assert target.read_text() == "# Plan\n"
    prompts = [body["messages"][0]["content"] for body in llm.requests[f"pat-{team}"]]
    assert all(f"Your tools: {', '.join(TEAM_TOOLS)}, write_file" in p for p in prompts)


class ApprovedMidTurn:
    """Submits a plan, then holds its next call until the test approved it, then writes."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.calls += 1
        if self.calls == 1:
            return ToolCalls([("submit_plan", {"plan": "write done.txt"})])
        if self.calls == 2:
            self.entered.set()
            self.release.wait(60)
            return ToolCalls([("write_file", {"path": "done.txt", "content": "done"})])
        return "written"


def test_an_approval_in_the_middle_of_a_turn_opens_the_gate_at_once(
    workers: str,
    wconn: redis.Redis,
    llm: ScriptedLLM,
    team: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "local")  # the state dir's, which it checks
    held = ApprovedMidTurn()
    model = llm.script(f"pat-{team}", handler=held)
    store = TeamStore(wconn, team)
    assert (
        spawn(
            workers, team, "pat", model, llm.api_base, "--plan-mode", "--tool", "write_file"
        ).exit_code
        == 0
    )
    assert held.entered.wait(60)
    [plan] = store.requests.all()
    _, woke = store.requests.review_plan(plan.id, True)
    assert not woke  # pat is still in its turn
    held.release.set()
    wait_until(lambda: store.get("pat").status is TeammateStatus.IDLE, message="pat idle")
    assert json.loads(tool_results(store, "pat")[-1])["ok"] is True
    assert (tmp_path / "state" / "teams" / team / "workspace" / "done.txt").read_text() == "done"
    assert idle_notices(store) == 1


def test_spawn_offers_the_listed_workspace_tools_and_bash_only_when_listed(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    models = {name: llm.script(f"{name}-{team}", ["resting"]) for name in ("ann", "ben", "cy")}
    extra = {
        "ann": ("--tool", "list_files", "--tool", "read_file", "--tool", "read_file"),
        "ben": ("--tool", "bash"),
        "cy": (),
    }
    store = TeamStore(wconn, team)
    for name, model in models.items():
        assert spawn(workers, team, name, model, llm.api_base, *extra[name]).exit_code == 0
    wait_until(lambda: idle_notices(store) == 3, message="three idle teammates")
    assert store.get("ann").tools == ["read_file", "list_files"]
    assert offered(llm, models["ann"]) == [[*TEAM_TOOLS, "read_file", "list_files"]]
    assert offered(llm, models["ben"]) == [[*TEAM_TOOLS, "bash"]]
    assert offered(llm, models["cy"]) == [TEAM_TOOLS]
    system = {name: llm.requests[f"{name}-{team}"][0]["messages"][0]["content"] for name in models}
    assert f"Your tools: {', '.join(TEAM_TOOLS)}, read_file, list_files\n" in system["ann"]
    assert "directory your team's teammates" in system["ann"]
    assert "directory your team's teammates" not in system["cy"]


def test_spawn_with_an_unknown_tool_exits_2_and_writes_nothing(
    redis_url: str, conn: redis.Redis, team: str
) -> None:
    for tool in ("shell", "send_message", "../x"):
        result = spawn(
            redis_url, team, "alice", OFFLINE_MODEL, None, "--tool", "read_file", "--tool", tool
        )
        assert result.exit_code == 2, result.output
        assert result.stderr.count("\n") == 1
        assert (
            f"unknown tool '{tool}'; use --tool with one of: read_file, write_file, "
            "edit_file, list_files, bash"
        ) in result.stderr
    assert conn.keys("teamctl:team:*") == []


def test_the_plan_gate_covers_edit_file_and_bash_but_not_reading(
    redis_url: str, conn: redis.Redis, team: str, tmp_path: Path
) -> None:
    store = TeamStore(conn, team)
    tools = ("--tool", "read_file", "--tool", "write_file", "--tool", "edit_file", "--tool", "bash")
    for name, extra in (("pat", ("--plan-mode",)), ("sam", ())):  # nobody serves "nobody"
        assert (
            spawn(
                redis_url, team, name, OFFLINE_MODEL, None, "--queue", "nobody", *tools, *extra
            ).exit_code
            == 0
        )
    boxes = {}
    for name in ("pat", "sam"):
        boxes[name] = Toolbox()
        add_teammate_workspace(boxes[name], store, store.get(name), tmp_path / "unused")
    assert (
        boxes["pat"].names == boxes["sam"].names == ["read_file", "write_file", "edit_file", "bash"]
    )
    workspace = tmp_path / "state" / "teams" / team / "workspace"
    edit = json.dumps({"path": "a.txt", "oldText": "one", "newText": "two"})
    bash = json.dumps({"command": "echo ran >> log.txt"})
    write = json.dumps({"path": "a.txt", "content": "one"})
    assert json.loads(boxes["sam"].call("write_file", write))["ok"]
    for box_tool, args in (("edit_file", edit), ("bash", bash), ("write_file", write)):
        refused = boxes["pat"].call(box_tool, args)
        assert refused.startswith("TOOL_ERROR: ") and '"PlanNotApproved"' in refused, refused
    assert json.loads(boxes["pat"].call("read_file", '{"path": "a.txt"}'))["content"] == "one"
    assert not (workspace / "log.txt").exists()
    plan = store.requests.submit_plan("pat", "edit a.txt")
    assert "waiting for the lead's review" in boxes["pat"].call("bash", bash)
    store.requests.review_plan(plan.id, True)
    # The same toolbox, built before the approval: the gate reads plan_state at each call.
    assert json.loads(boxes["pat"].call("edit_file", edit))["ok"]
    assert json.loads(boxes["pat"].call("bash", bash))["exitCode"] == 0
    assert (workspace / "a.txt").read_text() == "two"
    assert (workspace / "log.txt").read_text() == "ran\n"


class BusyUntilDone:
    """Keeps its turn going with a tool call per step until the test says the mail is all sent."""

    def __init__(self) -> None:
        self.done = threading.Event()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if not self.done.is_set():
            return ToolCalls([("list_teammates", {})])
        return "read them all"


def test_four_sender_processes_mid_turn_each_message_once_in_order(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    busy = BusyUntilDone()
    model = llm.script(f"bob-{team}", handler=busy, latency_s=0.02)
    store = TeamStore(wconn, team)
    # Room for every step and message: nothing may be trimmed from the memory checked below.
    store.create(TeamOptions(turn_max_steps=1000, memory_max_messages=100_000))
    assert spawn(workers, team, "bob", model, llm.api_base).exit_code == 0
    wait_until(lambda: llm.requests[f"bob-{team}"], message="bob's turn to start")
    tags = [f"p{i}" for i in range(SENDERS)]
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", SENDER_CODE, workers, team, tag, str(MESSAGES_PER_SENDER)]
        )
        for tag in tags
    ]
    for sender in senders:
        assert sender.wait(120) == 0
    busy.done.set()
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, 60, message="bob idle")
    got = [m["content"] for m in inbox_lines(store.turns.memory("bob"))]
    assert len(got) == SENDERS * MESSAGES_PER_SENDER == len(set(got))
    for tag in tags:
        assert [c for c in got if c.startswith(f"{tag}:")] == [
            f"{tag}:{i}" for i in range(MESSAGES_PER_SENDER)
        ]
    # All of it arrived mid-turn: one turn, fed over several steps, woken by none of the sends.
    assert idle_notices(store) == 1
    blocks = [m for m in store.turns.memory("bob") if str(m.get("content")).startswith("<inbox>")]
    assert len(blocks) >= 2
    assert store.messages.peek("bob")[1] == []


def test_sends_landing_as_turns_end_are_each_processed_once_and_turns_never_overlap(
    workers: str, wconn: redis.Redis, llm: ScriptedLLM, team: str
) -> None:
    model = llm.script(f"bob-{team}", ["noted"], repeat_last=True, latency_s=TURN_END_LATENCY_S)
    store = TeamStore(wconn, team)
    store.create(TeamOptions(memory_max_messages=100_000))
    assert spawn(workers, team, "bob", model, llm.api_base).exit_code == 0
    wait_until(lambda: store.get("bob").status is TeammateStatus.IDLE, message="bob's first turn")
    times = llm.request_times[f"bob-{team}"]
    sent, rounds = 0, 0
    while sent < TURN_END_SENDS:
        # Every call answers without a tool call, so each call's turn ends as it returns: aim
        # each burst around that moment (before it, between checkpoint and end, after it).
        seen = len(times)
        aim = times[-1] + TURN_END_LATENCY_S + SEND_OFFSETS_S[rounds % len(SEND_OFFSETS_S)]
        time.sleep(max(0.0, aim - time.monotonic()))  # timing the stimulus, not waiting on it
        for _ in range(min(BURST_SIZES[rounds % len(BURST_SIZES)], TURN_END_SENDS - sent)):
            store.messages.send("lead", "bob", f"m{sent}")
            sent += 1
        rounds += 1
        # Each burst is answered by a later call: in the same job or a woken one.
        wait_until(lambda seen=seen: len(times) > seen, message="bob's next model call")
    wait_until(
        lambda: (
            store.get("bob").status is TeammateStatus.IDLE and not store.messages.peek("bob")[1]
        ),
        message="bob idle with nothing unread",
    )
    got = [m["content"] for m in inbox_lines(store.turns.memory("bob"))]
    assert got == [f"m{i}" for i in range(TURN_END_SENDS)]
    # Never two model calls in flight: each takes the script's latency, so each arrives at least
    # that long after the one before, and each sees the whole conversation before it.
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert min(gaps) >= TURN_END_LATENCY_S
    bodies = [body["messages"][1:] for body in llm.requests[f"bob-{team}"]]
    for earlier, later in zip(bodies, bodies[1:], strict=False):
        assert later[: len(earlier)] == earlier
    # The bursts landed on both sides of turn ends: some turns went on in the same job (mail
    # came before the end), others were woken from idle (mail came after it).
    turns, idled = len(times), idle_notices(store)
    assert 1 < idled < turns
