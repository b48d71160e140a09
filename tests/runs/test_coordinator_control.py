"""Controlling a live run from other processes: cancel, and plan approval or rejection."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.advice import teamctl_prog
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL, run_cli
from tests.support.llm import Held, ScriptedLLM
from tests.support.replies import busy_until, script_run
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until


def in_thread(invoke: Callable[[], Result]) -> tuple[threading.Thread, list[Result]]:
    """Run a CLI invocation in the background (the test drives other processes meanwhile)."""
    results: list[Result] = []
    thread = threading.Thread(target=lambda: results.append(invoke()), daemon=True)
    thread.start()
    return thread, results


def teamctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TEAMCTL, *args], capture_output=True, text=True, timeout=60)


def test_cancel_from_another_process(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    never = threading.Event()
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=busy_until(never, "a"), synth=None)
    team = team_file(
        tmp_path / "t.toml", models, options={"heartbeat_ttl_s": 1.0, "member_max_steps": 100_000}
    )
    thread, results = in_thread(lambda: run_cli(llm, workers, run_id, team))
    wait_until(
        lambda: (t := board.get("a")) and t.status is TaskStatus.IN_PROGRESS,
        30,
        message="task a in progress",
    )

    cancel = teamctl("cancel", run_id, "--redis-url", workers)

    assert cancel.returncode == 0, cancel.stderr
    assert "cancel requested" in cancel.stdout
    thread.join(timeout=60)
    [result] = results
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"]) == ("cancelled", None)
    a, b = out["task_states"]
    # The in-flight task stops at its next model call: failed by its worker or, if the worker
    # abandoned it, reclaimed and blocked; the task that never ran is blocked.
    assert a["status"] in ("failed", "blocked") and "cancelled" in a["error"]
    assert (b["status"], b["error"]) == ("blocked", "cancelled")  # as Ctrl-C leaves it
    assert llm.prompts(f"synth-{run_id}") == []
    # A member's own task.error may land after the coordinator's last word: no order assumed.
    assert [m["content"] for m in out["messages"] if m["type"] == "run.cancelled"] == ["cancelled"]


def test_cancel_says_it_waits_for_the_call_in_hand_and_wait_returns_at_the_end(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    store = RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    held = Held("done a")
    models = script_run(
        llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}], member=[held], synth=None
    )
    team = team_file(tmp_path / "t.toml", models, options={"member_max_steps": 100_000})
    thread, results = in_thread(lambda: run_cli(llm, workers, run_id, team))
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 1,
        60,
        message="the member's model call on task a",
    )

    asked = teamctl("cancel", run_id, "--redis-url", workers)
    waiting = subprocess.Popen(
        [*TEAMCTL, "cancel", run_id, "--wait", "--redis-url", workers],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        first = waiting.stdout.readline() if waiting.stdout else ""
        assert store.state().status == "running"  # --wait has said its line, not returned
        held.release.set()
        stdout, stderr = waiting.communicate(timeout=120)
    finally:
        held.release.set()
        if waiting.poll() is None:
            waiting.kill()
    thread.join(timeout=60)

    requested = (
        f"cancel requested: the coordinator of run {run_id} is stopping it; its "
        "members stop after the model or tool call in hand (1 task in progress)"
    )
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.splitlines() == [
        f"{requested} (`{teamctl_prog()} cancel {run_id} --wait --redis-url {workers}` waits "
        "for the end)"
    ]
    assert waiting.returncode == 0, stderr
    assert [first.rstrip("\n"), *stdout.splitlines()] == [requested, f"run {run_id} cancelled"]
    assert store.state().status == "cancelled"
    assert results[0].exit_code == 1


def test_plan_rejected_from_another_shell_fails_the_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}], synth=None)
    team = team_file(tmp_path / "t.toml", models, options={"require_plan_approval": True})
    thread, results = in_thread(lambda: run_cli(llm, workers, run_id, team))
    wait_until(
        lambda: RunStore(conn, RunKeys(run_id)).state().status == "awaiting_approval",
        30,
        message="the plan to await approval",
    )

    reject = teamctl("reject", run_id, "--reason", "too broad", "--redis-url", workers)

    assert reject.returncode == 0, reject.stderr
    thread.join(timeout=60)
    [result] = results
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == "teamctl: plan rejected: too broad"
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.status, state.error) == ("failed", "plan rejected: too broad")
    assert TaskBoard(conn, RunKeys(run_id)).get("a").status is TaskStatus.BLOCKED
    assert llm.prompts(f"member-{run_id}") == []


def test_plan_approved_from_another_shell_runs(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m1", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan)
    team = team_file(tmp_path / "t.toml", models, options={"require_plan_approval": True})
    thread, results = in_thread(lambda: run_cli(llm, workers, run_id, team))
    wait_until(
        lambda: RunStore(conn, RunKeys(run_id)).state().status == "awaiting_approval",
        30,
        message="the plan to await approval",
    )
    # Nothing is dispatched before the approval: no task reads as ready yet.
    tasks = teamctl("tasks", run_id, "--redis-url", workers)
    assert [line.split()[:2] for line in tasks.stdout.splitlines()] == [
        ["a", "planned"],
        ["b", "planned"],
    ]
    status = teamctl("status", run_id, "--redis-url", workers)
    rows = [line.split()[:3] for line in status.stdout.splitlines()]
    assert ["a", "m1", "planned"] in rows and ["b", "m1", "planned"] in rows, status.stdout
    assert TaskBoard(conn, RunKeys(run_id)).get("a").status is TaskStatus.READY  # the board's

    approve = teamctl("approve", run_id, "--redis-url", workers)

    assert approve.returncode == 0, approve.stderr
    thread.join(timeout=60)
    [result] = results
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    assert "plan.approved" in [m["type"] for m in out["messages"]]


def test_approve_plan_flag_skips_the_wait(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}])
    result = run_cli(
        llm,
        workers,
        run_id,
        team_file(tmp_path / "t.toml", models),
        "--require-plan-approval",
        "--approve-plan",
    )
    assert result.exit_code == 0, result.output
    approved = [m for m in json.loads(result.stdout)["messages"] if m["type"] == "plan.approved"]
    assert [m["content"] for m in approved] == ["approved with --approve-plan"]


def test_a_run_id_in_use_is_refused(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}])
    team = team_file(tmp_path / "t.toml", models)
    assert run_cli(llm, workers, run_id, team).exit_code == 0
    again = CliRunner().invoke(
        main,
        [
            "run",
            "x",
            "--team",
            str(team),
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
    )
    assert again.exit_code == 2 and "already exists" in again.stderr


def test_timeout_stops_the_run(llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path) -> None:
    never = threading.Event()
    models = script_run(
        llm,
        run_id,
        [{"id": "a", "memberId": "m1", "task": "A"}],
        member=busy_until(never, "a"),
        synth=None,
    )
    team = team_file(
        tmp_path / "t.toml", models, options={"heartbeat_ttl_s": 1.0, "member_max_steps": 100_000}
    )
    result = run_cli(llm, workers, run_id, team, "--timeout-s", "1")

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"]) == ("failed", None)
    assert [m["content"] for m in out["messages"] if m["type"] == "run.failed"] == [
        "run timed out after 1s"
    ]
    assert out["task_states"][0]["status"] in ("failed", "blocked")
    assert llm.prompts(f"synth-{run_id}") == []
