"""End to end through real Redis, real rq workers and litellm against the scripted server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.task_records import TaskStatus

from tests.support.llm import ScriptedLLM
from tests.support.teamfile import team_file

PLAN = {
    "tasks": [
        {"id": "collect", "memberId": "m1", "task": "Collect facts"},
        {"id": "design", "memberId": "m2", "task": "Design the API"},
        {"id": "write", "memberId": "m3", "task": "Write it up", "dependsOn": ["collect"]},
    ]
}


def member_answer(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    task_id = re.search(r"^Task ID: (\S+)", prompt, re.M).group(1)
    return f"output of {task_id}"


def test_three_task_plan_runs_on_hand_started_workers(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)]),
        "member": llm.script(f"member-{run_id}", handler=member_answer),
        "synth": llm.script(f"synth-{run_id}", ["the synthesized answer"]),
    }
    team = team_file(
        tmp_path / "team.toml",
        models,
        team_id="e2e",
        members=[{"id": m, "name": f"Member {m}"} for m in ("m1", "m2", "m3")],
    )

    result = CliRunner().invoke(
        main,
        [
            "run",
            "Ship the thing",
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
            "--json",
        ],
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    assert out["output"] == "the synthesized answer"
    assert [t["id"] for t in out["plan"]["tasks"]] == ["collect", "design", "write"]
    assert out["plan"]["tasks"][2]["depends_on"] == ["collect"]
    outputs = {r["task_id"]: r["output"] for r in out["member_results"]}
    assert outputs == {t: f"output of {t}" for t in ("collect", "design", "write")}
    assert {s["task_id"]: s["status"] for s in out["task_states"]} == dict.fromkeys(
        ("collect", "design", "write"), "completed"
    )
    board = TaskBoard(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    collect, write = board.get("collect"), board.get("write")
    assert write.start_ms >= collect.end_ms
    assert write.claimed_by == "m3" and write.status is TaskStatus.COMPLETED
    # The synthesizer saw every member's output.
    synth_prompt = llm.prompts(f"synth-{run_id}")[0]
    assert "You are the team lead." in synth_prompt
    assert all(f"output: output of {t}" in synth_prompt for t in ("collect", "design", "write"))
    # The dependent's dispatch input carries its dependency's output.
    write_prompt = next(p for p in llm.prompts(f"member-{run_id}") if "Task ID: write" in p)
    assert "output of collect" in write_prompt
    types = [m["type"] for m in out["messages"]]
    assert types.count("task.assigned") == 3 and types.count("task.result") == 3
    assert types[-1] == "run.complete"


def test_offline_model_end_to_end_with_embedded_redis(tmp_path: Path) -> None:
    """The README's run command: no Redis configured, no model, no key."""
    teamctl = [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()"]
    try:
        done = subprocess.run(
            [*teamctl, "run", "Plan a picnic", "--workers", "1"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        assert "built-in offline model" in done.stderr
        assert done.stdout.startswith("Answer to: Plan a picnic")
        assert done.stdout.count("notes on") == 3
        run_id = re.search(r"run (\S+) on unix://:\*\*\*@", done.stderr).group(1)  # no password
        status = subprocess.run(
            [*teamctl, "status", run_id, "--json"], capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0, status.stderr
        result = json.loads(status.stdout)
        assert result["status"] == "completed"
        # Each member told the writer, whose task waits on theirs, over the bus.
        assert sorted(
            (m["from"], m["to"]) for m in result["messages"] if m["type"] == "peer.message"
        ) == [("analyst", "writer"), ("researcher", "writer")]
        # The same objective gives the same answer, byte for byte.
        again = subprocess.run(
            [*teamctl, "run", "Plan a picnic", "--workers", "1"],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert (again.returncode, again.stdout) == (0, done.stdout)
    finally:
        subprocess.run([*teamctl, "redis", "stop"], capture_output=True, timeout=60)
