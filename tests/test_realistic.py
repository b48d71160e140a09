"""At the default options, with model calls that take seconds as real providers' do.

A suite that only runs with shortened TTLs and instant models hid a crash that hit every real run
(any stretch of 5 s without a board event ended `teamctl run`)."""

from __future__ import annotations

import json
from pathlib import Path

from shared.team import RunOptions
from tests.scripted_llm import ScriptedLLM
from tests.test_coordinator import member_answer, run_cli, team_file

PLAN = [{"id": "a", "memberId": "m1", "task": "A"}, {"id": "b", "memberId": "m2", "task": "B"}]


def test_slow_models_at_default_options_complete(
        llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path) -> None:
    assert RunOptions().heartbeat_ttl_s == 30 and RunOptions().lease_ttl_s == 15
    models = {"planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)], latency_s=7),
              "member": llm.script(f"member-{run_id}", handler=member_answer, latency_s=8),
              "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=6)}
    team = team_file(tmp_path / "team.toml", models)  # no [options]: every default

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed" and out["output"] == "the answer"
    assert {r["task_id"]: r["output"] for r in out["member_results"]} == {
        "a": "output of a", "b": "output of b"}
    assert [s["attempts"] for s in out["task_states"]] == [1, 1]
