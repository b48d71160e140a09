"""A spent budget pauses a run (awaiting_budget) instead of failing it: its claims go back
uncounted, `teamctl budget` resumes it and the steps already paid for are replayed, `teamctl
cancel` ends it. Real `teamctl` processes, the shared RQ workers, the scripted model server."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path

import redis
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.model_call_records import ModelCallOutcome, ModelCallRecords
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL
from tests.support.llm import ScriptedLLM, ToolCalls, Used
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

ONE_TASK = [{"id": "a", "memberId": "m1", "task": "A"}]
TOKENS_PER_CALL = 18
"""What a scripted reply reports as its usage (11 prompt + 7 completion), unless `Used`."""
MAX_TOKENS = 10_000
"""The runs' budget: it covers the planner and one member call's worst case (its prompt and
the 4,096 tokens of output an unknown model may write), not two."""


def spending(reply: str | ToolCalls) -> Used:
    """A member reply whose reported usage brings the run, after the planner's call, to
    exactly MAX_TOKENS: the provider counted more than the reservation's estimate."""
    return Used(reply, MAX_TOKENS - TOKENS_PER_CALL - 7, 7)


PAUSED_LINE = re.compile(
    r"teamctl: run \S+ paused \((?P<why>[^)]*)\): `(?P<resume>[^`]*)` "
    r"resumes it, `(?P<cancel>[^`]*)` ends it"
)


def teamctl(*args: str) -> subprocess.CompletedProcess[str]:
    """One `teamctl` command in a process of its own."""
    return subprocess.run(
        [*TEAMCTL, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def start_run(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    team: Path,
    stderr: Path,
    reaper: list[subprocess.Popen[bytes]],
) -> subprocess.Popen[bytes]:
    """`teamctl run --json` in a session of its own, its stderr to a file the test reads."""
    with stderr.open("wb") as err:
        run = subprocess.Popen(
            [
                *TEAMCTL,
                "run",
                "Ship it",
                "--team",
                str(team),
                "--api-base",
                llm.api_base,
                "--redis-url",
                redis_url,
                "--workers",
                "0",
                "--run-id",
                run_id,
                "--json",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
    reaper.append(run)
    return run


def paused_line(stderr: Path) -> re.Match[str]:
    """The line `teamctl run` printed when the run paused, once it is there."""
    found: list[re.Match[str]] = []

    def printed() -> bool:
        found[:] = [
            m for line in stderr.read_text().splitlines() if (m := PAUSED_LINE.fullmatch(line))
        ]
        return bool(found)

    wait_until(printed, 90, message="`teamctl run` to say the run paused")
    assert len(found) == 1, stderr.read_text()  # said once
    return found[0]


def paused_run(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    tmp_path: Path,
    reaper: list[subprocess.Popen[bytes]],
    synth: list[str],
) -> tuple[subprocess.Popen[bytes], re.Match[str], str]:
    """A one-task run whose member's first call spends max_tokens (the planner's call and one
    member step), paused with task a given back; the run, its pause line and its member model.
    With `synth` empty the run is to end without another call."""
    first = spending(ToolCalls([("team_list_tasks", {})]))
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(ONE_TASK)]),
        "member": llm.script(f"member-{run_id}", [first, "done a"] if synth else [first]),
        "synth": llm.script(f"synth-{run_id}", synth),
    }
    team = team_file(
        tmp_path / "t.toml", models, options={"max_tokens": MAX_TOKENS, "heartbeat_ttl_s": 2.0}
    )
    stderr = tmp_path / "run.err"
    run = start_run(llm, redis_url, run_id, team, stderr, reaper)
    line = paused_line(stderr)
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    wait_until(
        lambda: (t := board.get("a")) and t.status is TaskStatus.READY,
        60,
        message="task a to be given back",
    )
    return run, line, f"member-{run_id}"  # the scripted server's name for its requests


def test_a_spent_budget_pauses_the_run_and_a_top_up_resumes_it_without_paying_twice(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    run, line, member = paused_run(llm, workers, run_id, tmp_path, group_reaper, ["final answer"])
    conn = redis.Redis.from_url(workers, decode_responses=True)
    store, board = RunStore(conn, RunKeys(run_id)), TaskBoard(conn, RunKeys(run_id))

    assert store.state().status == "awaiting_budget"
    a = board.get("a")
    assert a is not None
    # Given back for later: not failed, not an attempt, not a release; its step journaled.
    assert (a.attempts, a.error, a.reclaimed) == (0, None, True)
    assert (
        a.requeue_reason
        == line["why"]
        == (f"budget exceeded: {MAX_TOKENS} tokens used, max_tokens is {MAX_TOKENS}")
    )
    assert len(llm.requests[member]) == 1
    shown = teamctl("budget", run_id, "--redis-url", workers)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"tokens: {MAX_TOKENS} used of {MAX_TOKENS} (max_tokens {MAX_TOKENS} + 0 added)",
        f"spent: {line['why']}",
    ]
    assert "--add-tokens 10000" in line["resume"]  # enough for the next call's worst case

    # The command the run printed, pasted.
    resume = subprocess.run(
        shlex.split(line["resume"]),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert resume.returncode == 0, resume.stderr
    assert resume.stdout.splitlines()[0] == f"budget of run {run_id} raised; it goes on"
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    out = json.loads(stdout)
    assert (out["status"], out["output"]) == ("completed", "final answer")
    [state] = out["task_states"]
    assert (state["status"], state["attempts"]) == ("completed", 1)
    a = board.get("a")
    assert a is not None and a.replayed_steps == 1
    # Step 1 was paid once and replayed from the journal; only step 2 was asked for after.
    assert len(llm.requests[member]) == 2
    assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] == (
        MAX_TOKENS + 2 * TOKENS_PER_CALL
    )  # planner and step 1, then step 2 and synthesizer
    types = [m["type"] for m in out["messages"]]
    assert types.count("run.awaiting_budget") == 1 and types.count("run.budget_added") == 1
    assert (
        f"teamctl: run {run_id} resumed: its budget was raised"
        in (tmp_path / "run.err").read_text().splitlines()
    )


def test_cancel_ends_a_paused_run(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    run, line, member = paused_run(llm, workers, run_id, tmp_path, group_reaper, [])

    cancel = subprocess.run(
        shlex.split(line["cancel"]),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert cancel.returncode == 0, cancel.stderr
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, stderr
    out = json.loads(stdout)
    assert (out["status"], out["output"]) == ("cancelled", None)
    assert [(s["status"], s["error"]) for s in out["task_states"]] == [("blocked", "cancelled")]
    assert len(llm.requests[member]) == 1
    after = teamctl("budget", run_id, "--add-tokens", "10", "--redis-url", workers)
    assert after.returncode == 2 and len(after.stderr.splitlines()) == 1, after.stderr
    assert "has already finished (cancelled)" in after.stderr


def test_bad_budget_input_exits_2_with_one_line(workers: str, run_id: str) -> None:
    for args, says in (
        (["--add-usd", "-1"], "--add-usd '-1': give an amount"),
        (["--add-usd", "nan"], "--add-usd 'nan': give an amount"),
        (["--add-tokens", "1.5"], "--add-tokens '1.5': give a whole number"),
        (["--add-tokens", "0"], "--add-tokens '0': give a whole number"),
        (["--add-tokens", "5"], f"no run {run_id}"),
    ):
        done = teamctl("budget", run_id, *args, "--redis-url", workers)
        assert done.returncode == 2, done
        assert len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_a_planner_call_the_budget_cannot_cover_pauses_the_run_until_a_top_up(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    """The worker's side of the coordinator's call protocol is played here (nobody serves the
    planner's queue): its first attempt comes back `budget_spent`, as a worker writes it on
    BudgetSpent from the call's reservation; the run pauses, and after the top-up asks again."""
    conn = redis.Redis.from_url(workers, decode_responses=True)
    calls, store = ModelCallRecords(conn, RunKeys(run_id)), RunStore(conn, RunKeys(run_id))
    models = {
        "planner": "openai/unused-planner",
        "member": "openai/unused-member",
        "synth": "openai/unused-synth",
    }
    team = team_file(
        tmp_path / "t.toml",
        models,
        queue="nobody-plays-it",
        options={"max_cost_usd": 0.5, "require_plan_approval": True},
    )
    run = start_run(llm, workers, run_id, team, tmp_path / "run.err", group_reaper)

    def answer(outcome: ModelCallOutcome) -> None:
        wait_until(
            lambda: calls.view("planner").attempt and calls.view("planner").outcome is None,
            60,
            message="a planner attempt to answer",
        )
        attempt = calls.view("planner").attempt
        assert calls.begin("planner", attempt, "test:1", 30.0) is not None
        assert calls.finish("planner", attempt, outcome)

    spent = "budget exceeded: the call's worst case $0.6 is not covered by $0.5"
    answer(ModelCallOutcome(error=spent, worker="test:1", budget_spent=True))
    line = paused_line(tmp_path / "run.err")
    assert (line["why"], store.state().status) == (spent, "awaiting_budget")
    assert "--add-usd 1" in line["resume"]
    resumed = teamctl("budget", run_id, "--add-usd", "1", "--redis-url", workers)
    assert resumed.returncode == 0, resumed.stderr
    wait_until(lambda: store.state().status == "planning", 60, message="planning again")
    answer(ModelCallOutcome(reply=ModelReply(content=json.dumps(ONE_TASK)), worker="test:1"))

    # Planned on the second attempt; its plan awaits approval (no member runs): cancel it.
    wait_until(
        lambda: store.state().status == "awaiting_approval",
        60,
        message="the plan made after the top-up",
    )
    assert calls.view("planner").attempt == 2  # asked again, once
    assert teamctl("cancel", run_id, "--redis-url", workers).returncode == 0
    run.communicate(timeout=120)
    assert store.state().status == "cancelled"


def test_a_budget_spent_by_the_last_task_pauses_before_the_synthesis(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(ONE_TASK)]),
        "member": llm.script(f"member-{run_id}", [spending("done a")]),
        "synth": llm.script(f"synth-{run_id}", ["final answer"]),
    }
    team = team_file(tmp_path / "t.toml", models, options={"max_tokens": MAX_TOKENS})
    run = start_run(llm, workers, run_id, team, tmp_path / "run.err", group_reaper)
    line = paused_line(tmp_path / "run.err")
    board = TaskBoard(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    a = board.get("a")
    assert a is not None and a.status is TaskStatus.COMPLETED
    assert llm.requests[f"synth-{run_id}"] == []  # no synthesis on a spent budget

    raised = subprocess.run(
        shlex.split(line["resume"]),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert raised.returncode == 0, raised.stderr
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert json.loads(stdout)["output"] == "final answer"


def test_the_offline_model_keeps_a_budget_and_the_printed_top_up_resumes_it(
    workers: str, run_id: str, tmp_path: Path, group_reaper: list[subprocess.Popen[bytes]]
) -> None:
    """No provider to share, but a budget all the same: its calls are reserved too."""
    err = tmp_path / "run.err"
    with err.open("wb") as err_file:
        run = subprocess.Popen(
            [
                *TEAMCTL,
                "run",
                "Write a haiku",
                "--model",
                OFFLINE_MODEL,
                "--max-tokens",
                "400",
                "--redis-url",
                workers,
                "--workers",
                "0",
                "--run-id",
                run_id,
                "--json",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err_file,
            start_new_session=True,
        )
    group_reaper.append(run)
    line = paused_line(err)
    assert re.fullmatch(
        r"budget exceeded: \d+ tokens used, the next call may take \d+, "
        r"max_tokens is 400",
        line["why"],
    ), line["why"]
    assert line["resume"].endswith(f"budget {run_id} --add-tokens 10000 --redis-url {workers}")

    resumed = subprocess.run(
        shlex.split(line["resume"]),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )

    assert resumed.returncode == 0, resumed.stderr
    stdout, _ = run.communicate(timeout=120)
    assert run.returncode == 0, err.read_text()
    out = json.loads(stdout)
    assert out["status"] == "completed"
    assert out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"] <= 10_400
