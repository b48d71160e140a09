"""Runs named without their ids: `last` and `last~N` wherever a run is taken, the read-only verbs
defaulting to the last run and saying so on stderr, and `run` printing its id atop stdout on a
terminal (never into a pipe, never with --json)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.advice import for_this_shell
from teamctl.coordinator.cli import main
from teamctl.shared.keys import RUNS_INDEX, RunKeys

from tests.support.cli import TEAMCTL, assert_config_error, on_a_terminal
from tests.support.llm import ScriptedLLM
from tests.support.replies import script_run
from tests.support.runs import two_task_run
from tests.support.teamfile import team_file

START_MS = 1_790_000_000_000
RUN_DEADLINE_S = 120
TIME = r"^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d "
"""The time a line of `events` starts with (the date before it when not today)."""
BOARD = ["a\tready\t-\t0\t-", "b\tpending\t-\t0\t-"]
"""`teamctl tasks` of a run two_task_run stored, into a pipe."""


def stored_runs(conn: redis.Redis, tmp_path: Path, *run_ids: str) -> None:
    """Runs of the default team (tasks a and b, one message), started in the order given."""
    for offset, run_id in enumerate(run_ids):
        two_task_run(conn, run_id, tmp_path)
        conn.zadd(RUNS_INDEX, {run_id: START_MS + offset * 1000})


def teamctl(redis_url: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--redis-url", redis_url])


def spelled(redis_url: str, text: str) -> str:
    """`text` with its commands spelled as teamctl spells them for this test's shell."""
    return for_this_shell(redis_url).spell(text)


def test_last_and_last_n_count_back_through_the_runs_runs_lists(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stored_runs(conn, tmp_path, "r1", "r2", "r3", "gone")
    conn.delete(RunKeys("gone").spec)  # expired: `runs` no longer lists it, nor does `last`
    for ref, run_id, said in [
        ("last", "r3", "the last run"),
        ("last~1", "r2", "last~1, the run before the last"),
        ("last~2", "r1", "last~2, 2 runs before the last"),
    ]:
        tasks = teamctl(redis_url, "tasks", ref)
        assert (tasks.exit_code, tasks.stdout.splitlines()) == (0, BOARD), tasks.output
        assert tasks.stderr == f"teamctl: run {run_id} ({said})\n"

    past = teamctl(redis_url, "status", "last~3")
    assert_config_error(past, "")
    assert (
        past.stderr
        == spelled(
            redis_url,
            "teamctl: no run last~3: only 3 runs are recorded (`teamctl runs` lists them)",
        )
        + "\n"
    )
    assert conn.zscore(RUNS_INDEX, "gone") is not None  # resolving only reads
    listed = json.loads(teamctl(redis_url, "runs", "--json").stdout)
    assert [row["run_id"] for row in listed] == ["r3", "r2", "r1"]


def test_one_run_recorded_is_said_in_the_singular(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stored_runs(conn, tmp_path, "only")
    result = teamctl(redis_url, "tasks", "last~1")
    assert_config_error(result, "teamctl: no run last~1: only 1 run is recorded (")


@pytest.mark.parametrize("ref", ["last~0", "last~", "last~x", "last~-1", "last~1.5"])
def test_a_reference_that_does_not_count_is_one_line(
    conn: redis.Redis, redis_url: str, tmp_path: Path, ref: str
) -> None:
    stored_runs(conn, tmp_path, "r1", "r2")
    result = teamctl(redis_url, "status", ref)
    assert_config_error(result, "")
    assert result.stderr == (
        f"teamctl: invalid run reference {ref!r}: use `last` for the last "
        "run or `last~N`, N 1 or more, for the Nth run before it\n"
    )


def test_an_id_is_checked_as_before(conn: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    stored_runs(conn, tmp_path, "r1")
    unknown = teamctl(redis_url, "status", "r9")
    assert_config_error(unknown, "teamctl: no run r9; ")
    invalid = teamctl(redis_url, "tasks", "../r1")
    assert_config_error(invalid, "teamctl: invalid run id '../r1': use 1-128 letters")
    given = teamctl(redis_url, "tasks", "r1")
    assert (given.exit_code, given.stdout.splitlines(), given.stderr) == (0, BOARD, "")


@pytest.mark.parametrize(
    "verb",
    [
        ["status"],
        ["tasks"],
        ["tasks", "--follow"],
        ["messages"],
        ["events"],
        ["files"],
        ["transcript", "a"],
        ["report", "--html", "r.html"],
    ],
)
def test_with_no_runs_a_verb_without_a_run_is_one_line(redis_url: str, verb: list[str]) -> None:
    result = teamctl(redis_url, *verb)
    assert_config_error(result, "")
    assert (
        result.stderr
        == spelled(redis_url, "teamctl: no runs recorded yet: `teamctl run OBJECTIVE` starts one")
        + "\n"
    )


def test_the_read_verbs_default_to_the_last_run_and_say_so(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stored_runs(conn, tmp_path, "r1", "r2", "r3")
    cancelled = teamctl(redis_url, "cancel", "last")  # so that `events` ends
    assert (cancelled.exit_code, cancelled.stdout) == (0, "run r3 cancelled\n")
    said = "teamctl: run r3 (the last run)\n"
    assert cancelled.stderr == said

    status = teamctl(redis_url, "status")
    assert (status.exit_code, status.stderr) == (1, said)  # a cancelled run exits 1
    assert status.stdout.startswith("r3: cancelled; rounds 0; ")
    assert status.stdout.splitlines()[1:3] == ["objective: Objective X", "error: cancelled"]

    tasks = teamctl(redis_url, "tasks")
    assert (tasks.exit_code, tasks.stderr) == (0, said)
    assert tasks.stdout.splitlines() == [
        "a\tblocked\t-\t0\tcancelled",
        "b\tblocked\t-\t0\tcancelled",
    ]

    messages = teamctl(redis_url, "messages", "--json")
    assert (messages.exit_code, messages.stderr) == (0, said)
    assert [
        (m["from"], m["to"], m["type"]) for m in map(json.loads, messages.stdout.splitlines())
    ] == [("system", "researcher", "task.assigned"), ("system", "lead", "run.cancelled")]

    events = teamctl(redis_url, "events")
    assert (events.exit_code, events.stderr) == (0, said)
    assert [re.sub(TIME, "", line) for line in events.stdout.splitlines()] == [
        "[task created] a researcher attempts=0",
        "[task created] b writer attempts=0",
        "[task.assigned] (a) system -> researcher: A",
        "[task blocked] a researcher attempts=0",
        "[task blocked] b writer attempts=0",
        "[run.cancelled] system -> lead: cancelled",
    ]

    follow = teamctl(redis_url, "tasks", "--follow", "--json")
    assert (follow.exit_code, follow.stderr) == (0, said)
    assert [json.loads(line)["status"] for line in follow.stdout.splitlines()] == [
        "blocked",
        "blocked",
    ]

    files = teamctl(redis_url, "files")
    assert (files.exit_code, files.stdout) == (0, "")
    assert files.stderr.splitlines()[0] == said.strip()
    assert files.stderr.splitlines()[1].startswith(f"0 files in {tmp_path / 'r3'}")

    report = CliRunner().invoke(
        main, ["report", "--html", str(tmp_path / "r.html"), "--redis-url", redis_url]
    )
    assert (report.exit_code, report.stdout, report.stderr) == (0, f"{tmp_path / 'r.html'}\n", said)
    assert "<code>r3</code>" in (tmp_path / "r.html").read_text()


def test_transcript_with_a_task_alone_reads_the_last_run(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stored_runs(conn, tmp_path, "r1", "r2")
    alone = teamctl(redis_url, "transcript", "a")
    assert (alone.exit_code, alone.stderr) == (0, "teamctl: run r2 (the last run)\n")
    assert alone.stdout == "a: no transcript (its session has not started, or was never kept)\n"
    both = teamctl(redis_url, "transcript", "last~1", "b")
    assert (both.exit_code, both.stdout) == (
        0,
        "b: no transcript (its session has not started, or was never kept)\n",
    )
    assert both.stderr == "teamctl: run r1 (last~1, the run before the last)\n"

    unknown = teamctl(redis_url, "transcript", "zz")
    assert unknown.exit_code == 2
    assert unknown.stderr.splitlines() == [
        "teamctl: run r2 (the last run)",
        spelled(redis_url, "teamctl: run r2 has no task zz; `teamctl tasks r2` lists its tasks"),
    ]
    for given in ([], ["r1", "a", "b"]):
        wrong = teamctl(redis_url, "transcript", *given)
        assert_config_error(wrong, "")
        assert wrong.stderr == (
            "teamctl: transcript takes TASK_ID (a task of the last run) or "
            f"RUN_ID TASK_ID, not {len(given)} arguments\n"
        )


def test_every_verb_that_takes_a_run_takes_last(
    conn: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    stored_runs(conn, tmp_path, "r1", "r2")
    said = "teamctl: run r2 (the last run)\n"
    before = "teamctl: run r1 (last~1, the run before the last)\n"

    budget = teamctl(redis_url, "budget", "last")
    assert (budget.exit_code, budget.stderr) == (0, said)
    assert budget.stdout == (
        "no budget: neither max_tokens nor max_cost_usd is set\nthe budget lasts\n"
    )

    send = teamctl(redis_url, "send", "last", "--to", "writer", "hello")
    assert (send.exit_code, send.stderr) == (0, said)
    assert [
        m["content"]
        for m in map(
            json.loads,
            teamctl(
                redis_url, "messages", "r2", "--type", "peer.message", "--json"
            ).stdout.splitlines(),
        )
    ] == ["hello"]

    export = teamctl(redis_url, "export", "last~1", str(tmp_path / "out"))
    assert (export.exit_code, export.stderr) == (0, before)
    assert export.stdout.splitlines() == [
        str(tmp_path / "out" / "state" / "default.json"),
        str(tmp_path / "out" / "mailbox" / "default.jsonl"),
    ]

    approve = teamctl(redis_url, "approve", "last~1")
    assert approve.exit_code == 2
    assert approve.stderr.splitlines()[0] == before.strip()
    reject = teamctl(redis_url, "reject", "last", "--reason", "no")
    assert reject.exit_code == 2
    assert reject.stderr.splitlines()[0] == said.strip()

    cancel = teamctl(redis_url, "cancel", "last~1")
    assert (cancel.exit_code, cancel.stdout, cancel.stderr) == (0, "run r1 cancelled\n", before)
    resume = teamctl(redis_url, "resume", "last~1")
    assert resume.exit_code == 2
    assert resume.stderr.splitlines() == [
        before.strip(),
        spelled(
            redis_url, "teamctl: run r1 has already finished; `teamctl status r1` shows its result"
        ),
    ]


def test_run_refuses_the_id_last(redis_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["run", "x", "--run-id", "last", "--workers", "0", "--redis-url", redis_url]
    )
    assert_config_error(result, "")
    assert result.stderr == (
        "teamctl: run id 'last' is reserved: `last` names the most recent "
        "run; pass another --run-id\n"
    )
    assert redis.Redis.from_url(redis_url).zcard(RUNS_INDEX) == 0


# --- `run` on a terminal and into a pipe ------------------------------------------------------


def run_args(llm: ScriptedLLM, redis_url: str, run_id: str, tmp_path: Path) -> list[str]:
    """`teamctl run` of a one-task plan on the shared workers (scripted for `run_id`)."""
    models = script_run(llm, run_id, {"tasks": [{"id": "a", "memberId": "m1", "task": "A"}]})
    return [
        *TEAMCTL,
        "run",
        "Ship it",
        "--team",
        str(team_file(tmp_path / f"{run_id}.toml", models)),
        "--api-base",
        llm.api_base,
        "--redis-url",
        redis_url,
        "--workers",
        "0",
        "--run-id",
        run_id,
    ]


def test_run_puts_its_id_atop_a_terminal_and_status_then_reads_it(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    code, shown, stderr = on_a_terminal(run_args(llm, workers, run_id, tmp_path))
    assert code == 0, stderr
    assert shown == f"{run_id}\nfinal answer\n"

    status = teamctl(workers, "status")
    assert (status.exit_code, status.stderr) == (0, f"teamctl: run {run_id} (the last run)\n")
    assert status.stdout.startswith(f"{run_id}: completed; rounds 1; ")
    assert status.stdout.endswith("answer:\nfinal answer\n")


def test_run_keeps_a_pipe_and_json_as_they_were(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    piped_id, json_id = f"{run_id}-pipe", f"{run_id}-json"
    piped = subprocess.run(
        run_args(llm, workers, piped_id, tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_DEADLINE_S,
    )
    assert (piped.returncode, piped.stdout) == (0, "final answer\n"), piped.stderr
    assert piped.stderr.splitlines()[0].startswith(f"teamctl: run {piped_id} on ")

    code, shown, stderr = on_a_terminal([*run_args(llm, workers, json_id, tmp_path), "--json"])
    assert code == 0, stderr
    result = json.loads(shown)  # the object alone: it carries the id
    assert (result["run_id"], result["output"]) == (json_id, "final answer")
