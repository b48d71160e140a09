"""A chain of slow tasks at the default options (scaled by tests/support/timescale.py), with model
calls that take seconds as real providers' do.

A suite that only ran with shortened TTLs and instant models hid a crash that hit every real run
(any stretch of 5 s without a board event ended `teamctl run`); the realistic tier runs this at
the real defaults and latencies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from teamctl.shared.runs.options import RunOptions

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM
from tests.support.rate_limited import RateLimitedProvider
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, time_scale, timing_options

PLAN = [
    {"id": "a", "memberId": "m1", "task": "A"},
    {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    {"id": "c", "memberId": "m3", "task": "C"},
]


@pytest.mark.realistic
def test_a_chain_of_slow_tasks_completes_at_the_default_options(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    options = timing_options()
    if time_scale() == 1:
        defaults = RunOptions()
        assert [options[k] == getattr(defaults, k) for k in options] == [True] * len(options)
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(PLAN)], latency_s=scaled(7)),
        # 4-12 s a call at 1x, drawn from a seeded generator: the tasks end out of step.
        "member": llm.script(
            f"member-{run_id}", handler=member_answer, latency_s=scaled(8), latency_seed=7
        ),
        "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(6)),
    }
    team = team_file(tmp_path / "team.toml", models, options=options)

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed" and out["output"] == "the answer"
    assert {r["task_id"]: r["output"] for r in out["member_results"]} == {
        t: f"output of {t}" for t in ("a", "b", "c")
    }
    assert [s["attempts"] for s in out["task_states"]] == [1, 1, 1]
    b_prompt = next(p for p in llm.prompts(f"member-{run_id}") if "Task ID: b" in p)
    assert "output of a" in b_prompt  # b ran after a, with a's output


@pytest.mark.realistic
def test_a_provider_limit_makes_the_run_wait_for_most_of_it_and_lose_nothing(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    # 6 calls a minute at 1x (one per 10 s) against member calls of 4 s: without the limit
    # the 6 tasks would take ~12 s on 2 workers; with it ~50 s, most of it waiting.
    rpm = round(6 / time_scale())
    # The provider's burst is the limiter's: one second's worth, at least one.
    provider = RateLimitedProvider(rps=rpm / 60, burst=max(1, rpm // 60), answer=member_answer)
    plan = [{"id": f"t{n}", "memberId": f"m{n % 3 + 1}", "task": f"T{n}"} for n in range(6)]
    member = f"member-{run_id}"
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)], latency_s=scaled(3)),
        "member": llm.script(member, handler=provider.handler, latency_s=scaled(4)),
        "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(3)),
    }
    team = tmp_path / "team.json"
    team_file(team, models, options=timing_options())
    spec = json.loads(team.read_text())
    team.write_text(json.dumps({**spec, "limits": {models["member"]: {"rpm": rpm}}}))

    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed" and out["output"] == "the answer"
    assert [s["attempts"] for s in out["task_states"]] == [1] * 6  # no claim lost waiting
    times = llm.request_times[member]
    interval_s = 60 / rpm
    # Every call at its slot: the provider refused at most one that arrived a hair early, and
    # the calls came about one interval apart, so waiting filled most of the run.
    assert provider.refused <= 1 and provider.served == 6
    assert times[-1] - times[0] >= (5 - max(1, rpm // 60)) * interval_s * 0.95
    assert times[-1] - times[0] > 0.5 * out["total_duration_ms"] / 1000
