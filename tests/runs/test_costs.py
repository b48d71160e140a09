"""Cost accounting with a real price: a model name litellm knows (gpt-4o-mini), served by the
scripted server, so `usage.cost_usd`, `max_cost_usd` and the promise that a run never spends
past its budget (each call's worst case is reserved before it is made) are checked with
litellm's own prices."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import redis
from click.testing import Result
from teamctl.shared.agent.llm import load_litellm
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskStatus

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

PRICED = "gpt-4o-mini"
PROMPT_TOKENS, COMPLETION_TOKENS = 11, 7
"""What every scripted reply reports as its usage."""


@pytest.fixture
def call_cost_usd() -> float:
    """What one scripted call to the priced model costs at litellm's local prices."""
    price = load_litellm().model_cost[PRICED]
    return (
        PROMPT_TOKENS * price["input_cost_per_token"]
        + COMPLETION_TOKENS * price["output_cost_per_token"]
    )


def test_a_priced_model_is_charged_and_the_budget_is_never_overshot(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, call_cost_usd: float
) -> None:
    plan = [{"id": "a", "memberId": "m1", "task": "A"}, {"id": "b", "memberId": "m2", "task": "B"}]
    # Both members keep working (a tool call a turn) until the budget stops them.
    member = llm.script(
        PRICED, [ToolCalls([("team_list_tasks", {})])], repeat_last=True, latency_s=0.2
    )
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)]),
        "member": f"openai/{PRICED}",
        "synth": llm.script(f"synth-{run_id}", []),
    }  # paused, then cancelled: no synthesis
    assert member == models["member"]
    # A call reserves its worst case: the prompt's estimate and the model's maximum output.
    info = load_litellm().get_model_info(PRICED)
    worst_output_usd = info["max_output_tokens"] * info["output_cost_per_token"]
    budget_usd = worst_output_usd * 1.2 + 3.5 * call_cost_usd
    team = team_file(
        tmp_path / "team.toml",
        models,
        options={"max_cost_usd": budget_usd, "max_concurrency": 2, "member_max_steps": 1000},
    )

    store = RunStore(redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id))
    done: list[Result] = []
    thread = threading.Thread(
        target=lambda: done.append(run_cli(llm, workers, run_id, team)), daemon=True
    )
    thread.start()
    # Spent, it pauses once both members gave their tasks back; cancelled then, it ends.
    board = TaskBoard(store.conn, RunKeys(run_id))
    wait_until(
        lambda: (
            store.exists()
            and store.state().status == "awaiting_budget"
            and board.counts().get(TaskStatus.READY, 0) == 2
        ),
        60,
        message="the run to pause with both tasks given back",
    )
    store.request_stop("cancelled")
    thread.join(60)
    [result] = done

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    calls = len(llm.requests[PRICED])
    assert out["usage"]["cost_usd"] == pytest.approx(calls * call_cost_usd)
    assert not any(r["usage"]["unpriced"] for r in out["member_results"])  # the planner's is
    # No call starts that the budget could not cover at its worst: spend stays under it.
    assert calls >= 1 and out["usage"]["cost_usd"] <= budget_usd
    assert out["status"] == "cancelled"
    assert out["output"] is None  # no synthesis on a spent budget
    assert [m["type"] for m in out["messages"]].count("run.awaiting_budget") == 1
    # Every call is charged to its task too, whatever became of the attempt that made it.
    per_task = sum(t.usage.cost_usd for t in board.snapshot())
    assert per_task == pytest.approx(out["usage"]["cost_usd"])


def test_an_offline_run_counts_its_members_calls(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """The offline model has no provider account, but its usage is the run's all the same."""
    from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL

    team = team_file(
        tmp_path / "t.toml",
        {"planner": OFFLINE_MODEL, "synth": OFFLINE_MODEL, "member": OFFLINE_MODEL},
    )
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    tasks = TaskBoard(
        redis.Redis.from_url(workers, decode_responses=True), RunKeys(run_id)
    ).snapshot()
    assert tasks and all(t.usage.prompt_tokens > 0 for t in tasks)
    members = sum(t.usage.prompt_tokens + t.usage.completion_tokens for t in tasks)
    total = out["usage"]["prompt_tokens"] + out["usage"]["completion_tokens"]
    assert total > members > 0  # the planner's and synthesizer's calls come on top
