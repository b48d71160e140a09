"""SIGKILL the coordinator mid-run, then `teamctl resume`: the run completes, nothing runs twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import TEAMCTL
from tests.support.llm import ScriptedLLM
from tests.support.replies import busy_until, script_run, task_id_of
from tests.support.teamfile import team_file
from tests.support.timescale import scaled
from tests.support.waiting import wait_until


@pytest.mark.realistic
def test_sigkill_coordinator_then_resume_completes_without_rerunning(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    lease_ttl_s = scaled(15, floor_s=5.0)  # outlives the start of `teamctl resume --wait`
    conn = redis.Redis.from_url(workers, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    release_b = threading.Event()
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=busy_until(release_b, "b"))
    team = team_file(
        tmp_path / "t.toml",
        models,
        options={
            "lease_ttl_s": lease_ttl_s,
            "heartbeat_ttl_s": scaled(30, floor_s=10),
            "member_max_steps": 100_000,
        },
    )
    run_args = [
        "run",
        "Ship it",
        "--team",
        str(team),
        "--api-base",
        llm.api_base,
        "--redis-url",
        workers,
        "--workers",
        "0",
        "--run-id",
        run_id,
    ]
    coordinator = subprocess.Popen(
        [*TEAMCTL, *run_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_until(
            lambda: (t := board.get("b")) and t.status is TaskStatus.IN_PROGRESS,
            90,
            message="task b in progress",
        )
        second = CliRunner().invoke(
            main, ["resume", run_id, "--redis-url", workers, "--workers", "0"]
        )
        assert second.exit_code == 2 and "is driven by" in second.stderr
    finally:
        os.kill(coordinator.pid, signal.SIGKILL)
        coordinator.wait(timeout=30)
    # Pasted at once, while the dead coordinator's lease lives on: --wait waits it out.
    err = tmp_path / "resume.err"
    with err.open("wb") as err_file:
        resumed = subprocess.Popen(
            [
                *TEAMCTL,
                "resume",
                run_id,
                "--redis-url",
                workers,
                "--workers",
                "0",
                "--json",
                "--wait",
            ],
            stdout=subprocess.PIPE,
            stderr=err_file,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_until(
            lambda: "waiting for the lease to expire" in err.read_text(),
            60,
            message="`resume --wait` to say it waits for the lease",
        )
        assert conn.exists(RunKeys(run_id).lease)
        release_b.set()  # the in-flight task finishes while no coordinator is alive
        wait_until(lambda: board.get("b").status is TaskStatus.COMPLETED, 30, message="b completed")
        stdout, _ = resumed.communicate(timeout=60 + lease_ttl_s)
    finally:
        if resumed.poll() is None:
            resumed.kill()
            resumed.wait(30)

    assert resumed.returncode == 0, err.read_text()
    out = json.loads(stdout)
    assert (out["status"], out["output"], out["rounds"]) == ("completed", "final answer", 2)
    assert [(s["task_id"], s["status"], s["attempts"]) for s in out["task_states"]] == [
        ("a", "completed", 1),
        ("b", "completed", 1),
    ]
    member_tasks = [task_id_of(body) for body in llm.requests[f"member-{run_id}"]]
    assert member_tasks.count("a") == 1
    assert len(llm.prompts(f"synth-{run_id}")) == 1
    assert [m["type"] for m in out["messages"]].count("run.complete") == 1
    again = CliRunner().invoke(main, ["resume", run_id, "--redis-url", workers])
    assert again.exit_code == 2 and "already finished" in again.stderr


def test_plan_approval_waits_durably_across_a_dead_coordinator(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}])
    team = team_file(
        tmp_path / "t.toml", models, options={"lease_ttl_s": 1.0, "require_plan_approval": True}
    )
    coordinator = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        store = RunStore(conn, RunKeys(run_id))
        wait_until(
            lambda: store.state().status == "awaiting_approval",
            90,
            message="the plan to await approval",
        )
    finally:
        os.kill(coordinator.pid, signal.SIGKILL)
        coordinator.wait(timeout=30)
    approved = CliRunner().invoke(main, ["approve", run_id, "--redis-url", workers])
    assert approved.exit_code == 0, approved.output
    wait_until(lambda: not conn.exists(RunKeys(run_id).lease), 10, message="lease expiry")

    resumed = CliRunner().invoke(
        main, ["resume", run_id, "--redis-url", workers, "--workers", "0", "--json"]
    )

    assert resumed.exit_code == 0, resumed.output
    out = json.loads(resumed.stdout)
    assert (out["status"], out["task_states"][0]["status"]) == ("completed", "completed")
    assert len(llm.prompts(f"plan-{run_id}")) == 1  # the stored plan was used, not re-made
