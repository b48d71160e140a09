"""The built-in offline model plays a team: with no key, a planned run's member reads the board,
calls its Python tool and tells the member waiting on it; a teammate completes the tasks claimed
for it, answers the lead, approves a shutdown, waits for its plan's review in plan mode; the lead
spawns the teammates a person names, puts their tasks on the board and asks them to shut down.
Real Redis, the session's real workers, the real litellm client and its offline provider."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.teams import add, base_args, cli, spawn, task
from tests.support.waiting import wait_until

TEAM_FILE = """team_id = "offline"
model = "teamctl-offline/default"

[[members]]
id = "m1"
tools = ["tests.pytools_fixture.tools:search_docs"]

[[members]]
id = "m2"
"""


def test_offline_members_read_the_board_call_their_tool_and_tell_who_waits_on_them(
    workers: str, wconn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    team = tmp_path / "team.toml"
    team.write_text(TEAM_FILE)
    result = CliRunner().invoke(
        main,
        [
            "run",
            "Write a launch note",
            "--team",
            str(team),
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    # The planner made m2's task wait on m1's; m1 told m2 so over the bus.
    peer = [m for m in out["messages"] if m["type"] == "peer.message"]
    assert [(m["from"], m["to"]) for m in peer] == [("m1", "m2")]
    assert peer[0]["content"].startswith("m1_part is done, which your task waits on: [m1] m1_part")
    kept = Transcripts(wconn, RunKeys(run_id)).load_many(["m1_part", "m2_part"])
    calls = [
        call["function"]["name"]
        for message in kept["m1_part"]
        for call in message.get("tool_calls") or []
    ]
    assert calls == ["team_read_messages", "team_list_tasks", "search_docs", "team_send_message"]
    # m2 read the message with its first call.
    read = next(m for m in kept["m2_part"] if m.get("role") == "tool")
    assert "m1_part is done" in read["content"]

    # `teamctl transcript` shows the same, a line per message.
    shown = cli("transcript", run_id, "m1_part", "--redis-url", workers)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[2] == (
        "assistant: calls team_read_messages({}); team_list_tasks({}); "
        'search_docs({"query": "offline demo"})'
    )
    assert lines[-1].startswith("assistant: [m1] m1_part: notes on")
    unknown = cli("transcript", run_id, "m9_part", "--redis-url", workers)
    assert unknown.exit_code == 2
    assert f"run {run_id} has no task m9_part" in unknown.stderr


def lead_inbox(url: str, team: str) -> list[dict[str, str]]:
    shown = cli("team", "messages", "--json", *base_args(url, team))
    assert shown.exit_code == 0, shown.output
    return [json.loads(line) for line in shown.stdout.splitlines()]


def test_an_offline_teammate_does_its_task_answers_the_lead_and_agrees_to_shut_down(
    workers: str, wconn: redis.Redis, team: str
) -> None:
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "scout", OFFLINE_MODEL, None).exit_code == 0
    wait_until(lambda: store.get("scout").status is TeammateStatus.IDLE, message="scout idle")

    task_id = add(workers, team, "Draft the intro")
    wait_until(
        lambda: task(store, task_id).status is TaskStatus.COMPLETED,
        60,
        message="the task completed by scout",
    )
    done = task(store, task_id)
    assert (done.claimed_by, done.output) == ("scout", f"[scout-role] scout: did {task_id}.")

    assert cli("team", "send", "scout", "What is left?", *base_args(workers, team)).exit_code == 0
    wait_until(
        lambda: any(
            m["from"] == "scout" and m["type"] == "peer.message" for m in lead_inbox(workers, team)
        ),
        60,
        message="scout's answer to the lead",
    )
    [answer] = [
        m for m in lead_inbox(workers, team) if m["from"] == "scout" and m["type"] == "peer.message"
    ]
    assert answer["to"] == "lead" and answer["content"].endswith(": What is left?")

    # No --force: the teammate approves the request itself.
    stopped = cli("team", "shutdown", "scout", "--wait", "60", *base_args(workers, team))
    assert stopped.exit_code == 0, stopped.output
    assert store.get("scout").status is TeammateStatus.SHUTDOWN


def test_an_offline_teammate_in_plan_mode_does_its_task_once_the_plan_is_approved(
    workers: str, wconn: redis.Redis, team: str
) -> None:
    store = TeamStore(wconn, team)
    assert spawn(workers, team, "pat", OFFLINE_MODEL, None, "--plan-mode").exit_code == 0

    def pending() -> list[dict[str, str]]:
        shown = cli("team", "requests", "--pending", "--json", *base_args(workers, team))
        return json.loads(shown.stdout)

    # Its first turn asks for the plan's approval; until then no task is handed to it.
    wait_until(lambda: len(pending()) == 1, 60, message="pat's plan request")
    [request] = pending()
    assert (request["kind"], request["from"]) == ("plan_approval", "pat")
    wait_until(lambda: store.get("pat").status is TeammateStatus.IDLE, message="pat idle")
    task_id = add(workers, team, "Rename the module")
    assert task(store, task_id).status is TaskStatus.READY

    reviewed = cli("team", "review", request["id"], "--approve", *base_args(workers, team))
    assert reviewed.exit_code == 0, reviewed.output
    wait_until(
        lambda: task(store, task_id).status is TaskStatus.COMPLETED,
        60,
        message="the task completed after the review",
    )
    assert task(store, task_id).output == f"[pat-role] pat: did {task_id}."


def test_the_offline_lead_spawns_the_named_teammate_gives_it_a_task_and_shuts_it_down(
    workers: str, wconn: redis.Redis, team: str
) -> None:
    store = TeamStore(wconn, team)
    said = cli(
        "lead",
        *base_args(workers, team),
        "--workers",
        "0",
        "--until-idle",
        "-m",
        "Spawn a teammate called carol as a writer. tasks: draft the intro",
    )
    assert said.exit_code == 0, said.output
    assert said.stdout.splitlines()[0] == (
        f"[lead of {team}] spawned carol; created task_1 (draft the intro)."
    )
    assert store.get("carol").role == "writer"
    wait_until(
        lambda: task(store, "task_1").status is TaskStatus.COMPLETED,
        60,
        message="carol's task completed",
    )
    assert task(store, "task_1").claimed_by == "carol"

    stop = cli(
        "lead",
        *base_args(workers, team),
        "--workers",
        "0",
        "--until-idle",
        "-m",
        "Please shut down carol.",
    )
    assert stop.exit_code == 0, stop.output
    assert stop.stdout.splitlines()[0] == f"[lead of {team}] asked carol to shut down."
    wait_until(
        lambda: store.get("carol").status is TeammateStatus.SHUTDOWN,
        60,
        message="carol shut down after approving",
    )
