"""The planner step: its prompt, a provider error failing the run cleanly, an empty plan."""

from __future__ import annotations

import json
from pathlib import Path

import redis
from teamctl.coordinator.runs.roles import fallback_tasks, planner_prompt
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.team_file import Member

from tests.support.cli import run_cli
from tests.support.llm import HttpError, ScriptedLLM
from tests.support.teamfile import team_file


def test_planner_prompt_lists_members_with_null_checks_only() -> None:
    members = [
        Member(id="a", name="Alice", description="research"),
        Member(id="b"),
        Member(id="c", description=""),
    ]
    prompt = planner_prompt("Do X", members)
    assert prompt.startswith("You are a team planner.\n")
    assert (
        "Available members:\n- id=a, name=Alice, expertise=research\n- id=b\n- id=c, expertise="
        in prompt
    )
    assert prompt.endswith("\n\nObjective:\nDo X")


def test_fallback_uses_the_objective_when_a_description_is_blank() -> None:
    tasks = fallback_tasks(
        "Goal", [Member(id="a", description="maps"), Member(id="b", description=" ")]
    )
    assert [(t.id, t.member_id, t.task, t.context) for t in tasks] == [
        ("fallback_1", "a", "Focus on maps. Objective: Goal", "planner_fallback"),
        ("fallback_2", "b", "Goal", "planner_fallback"),
    ]


def test_planner_model_error_fails_the_run_with_the_provider_error_and_writes_no_plan(
    llm: ScriptedLLM, wconn: redis.Redis, workers: str, run_id: str, tmp_path: Path
) -> None:
    planner = llm.script(f"plan-{run_id}", [HttpError(400, "context window exceeded, sorry")])
    team = team_file(tmp_path / "t.toml", {"planner": planner, "synth": planner, "member": planner})
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 1
    assert result.stdout == ""
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("teamctl: planner failed: model openai/plan-")
    assert "context window exceeded, sorry" in last_line
    assert "Traceback" not in result.stderr
    state = RunStore(wconn, RunKeys(run_id)).state()
    assert (state.status, state.plan) == ("failed", None)
    assert "context window exceeded, sorry" in state.error
    assert TaskBoard(wconn, RunKeys(run_id)).task_ids() == []


def test_unparseable_plan_without_fallback_runs_no_task_and_still_synthesizes(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    planner = llm.script(f"plan-{run_id}", ["no plan here"])
    synth = llm.script(f"synth-{run_id}", ["nothing to merge"])
    team = team_file(tmp_path / "t.toml", {"planner": planner, "synth": synth, "member": synth})
    result = run_cli(llm, workers, run_id, team, "--no-broadcast-on-planner-failure")

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["rounds"], out["plan"]["tasks"], out["plan"]["fallback"]) == (0, [], False)
    assert out["output"] == "nothing to merge"
    assert "Member outputs:\n(none)" in llm.prompts(f"synth-{run_id}")[0]


def test_a_planner_model_with_no_known_provider_fails_the_run_in_one_line(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    team = team_file(
        tmp_path / "t.toml", {"planner": "teamctl/offline", "synth": "x/y", "member": "x/y"}
    )
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "teamctl: planner failed: model teamctl/offline: litellm knows no provider by that "
        "name; write it as PROVIDER/MODEL (openai/gpt-4o-mini, "
        "anthropic/claude-3-5-haiku-latest, ...) or teamctl-offline/default for the offline "
        "model"
    )
