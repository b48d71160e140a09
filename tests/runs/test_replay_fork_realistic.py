"""A fork of a run made at the default options with model calls of seconds, as a provider's: the
fork pays only for the forked task's remaining steps, what depends on it and the synthesis, and
keeps every other output (scaled by tests/support/timescale.py; the realistic tier runs it at 1x,
calls of 3 s)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.runs.options import RunOptions

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import task_id_of
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, time_scale, timing_options

TOOL = "tests.pytools_fixture.tools:count_step"
PLAN = {
    "tasks": [
        {"id": "t1", "memberId": "m1", "task": "Gather"},
        {"id": "t2", "memberId": "m2", "task": "Shape", "dependsOn": ["t1"]},
        {"id": "t3", "memberId": "m2", "task": "Check", "dependsOn": ["t2"]},
        {"id": "t4", "memberId": "m1", "task": "Aside"},
    ]
}
"""t1 -> t2 -> t3 (t2 and t3 are m2's), and t4 on its own."""
CALL_S = 3.0
"""Every scripted call's latency at 1x."""


class Member:
    """Each task: step 1 calls count_step (a line in `log`), step 2 answers, naming who did it."""

    def __init__(self, tag: str, log: Path) -> None:
        self.tag = tag
        self.log = log

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return ToolCalls([("count_step", {"path": str(self.log), "step": 1})])
        return f"{self.tag} did {task_id_of(body)}"


def requests_per_model(llm: ScriptedLLM, models: dict[str, str]) -> dict[str, int]:
    return {role: len(llm.requests[m.removeprefix("openai/")]) for role, m in models.items()}


def outputs(out: dict[str, Any]) -> dict[str, str]:
    return {r["task_id"]: r["output"] for r in out["member_results"]}


@pytest.mark.realistic
def test_a_fork_of_a_slow_run_pays_only_for_what_depends_on_its_point(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    options = timing_options()
    if time_scale() == 1:
        defaults = RunOptions()
        assert [options[k] == getattr(defaults, k) for k in options] == [True] * len(options)
    log = tmp_path / "tool.log"
    latency_s = scaled(CALL_S)
    models = {
        "planner": llm.script(
            f"plan-{run_id}", handler=lambda body: json.dumps(PLAN), latency_s=latency_s
        ),
        "m1": llm.script(f"m1-{run_id}", handler=Member("m1", log), latency_s=latency_s),
        "m2": llm.script(f"m2-{run_id}", handler=Member("m2", log), latency_s=latency_s),
        "synth": llm.script(
            f"synth-{run_id}", handler=lambda body: "the synthesis", latency_s=latency_s
        ),
    }
    members = [
        {"id": "m1", "model": models["m1"], "tools": [TOOL]},
        {"id": "m2", "model": models["m2"], "tools": [TOOL]},
    ]
    team = team_file(tmp_path / "team.toml", models, members=members, options=options)
    source = run_cli(llm, workers, run_id, team)
    assert source.exit_code == 0, source.output
    assert outputs(json.loads(source.stdout)) == {
        "t1": "m1 did t1",
        "t2": "m2 did t2",
        "t3": "m2 did t3",
        "t4": "m1 did t4",
    }
    assert requests_per_model(llm, models) == {"planner": 1, "m1": 4, "m2": 4, "synth": 1}
    assert log.read_text() == "1\n" * 4
    new_m2 = llm.script(f"m2new-{run_id}", handler=Member("m2new", log), latency_s=latency_s)
    models["new m2"] = new_m2

    fork = CliRunner().invoke(
        main,
        [
            "fork", run_id, "--at", "t2:2", "--member-model", f"m2={new_m2}",
            "--redis-url", workers, "--workers", "0", "--run-id", f"{run_id}-f", "--json",
        ],
    )  # fmt: skip

    assert fork.exit_code == 0, fork.output
    out = json.loads(fork.stdout)
    assert out["status"] == "completed" and out["output"] == "the synthesis"
    # t2's second step and t3's two steps on m2's new model, and the synthesis; nothing else.
    assert requests_per_model(llm, models) == {
        "planner": 1,
        "m1": 4,
        "m2": 4,
        "synth": 2,
        "new m2": 3,
    }
    assert outputs(out) == {
        "t1": "m1 did t1",  # kept
        "t2": "m2new did t2",  # step 1 replayed, step 2 on the new model
        "t3": "m2new did t3",  # depends on t2: run again, on the new model
        "t4": "m1 did t4",  # kept
    }
    assert log.read_text() == "1\n" * 5  # t3's tool ran again; t2's recorded call did not
    # The replayed step's request is not asked again: t2's live step sees its recorded result.
    t2_live = next(b for b in llm.requests[new_m2.removeprefix("openai/")] if task_id_of(b) == "t2")
    assert [m["content"] for m in t2_live["messages"] if m["role"] == "tool"] == ["step 1 done"]
    diff = CliRunner().invoke(
        main, ["diff", run_id, f"{run_id}-f", "--redis-url", workers, "--json"]
    )
    assert diff.exit_code == 0, diff.output
    compared = json.loads(diff.stdout)
    assert [t["task_id"] for t in compared["tasks"] if t["same_output"] is False] == ["t2", "t3"]
    # The plan, t1's and t4's two steps each, and t2's first.
    assert compared["b"]["reused_calls"] == 6
