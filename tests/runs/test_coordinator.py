"""Run semantics (AI4J's dispatch loop) through the CLI, real workers and Redis."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import Scripts, sources
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.store import RunStore

from tests.support.cli import errors, run_cli
from tests.support.llm import HttpError, ScriptedLLM
from tests.support.replies import member_answer, script_run, task_id_of
from tests.support.teamfile import team_file
from tests.support.waiting import assert_ttl_as_set, wait_until

CYCLE = "unresolved dependencies or cyclic plan"


def statuses(out: dict[str, Any]) -> dict[str, str]:
    return {s["task_id"]: s["status"] for s in out["task_states"]}


def board_of(url: str, run_id: str) -> TaskBoard:
    return TaskBoard(redis.Redis.from_url(url, decode_responses=True), RunKeys(run_id))


def test_plan_delegate_synthesize_with_auto_ids(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [
        {"memberId": "m1", "task": "Collect facts"},
        {"memberId": "m2", "task": "Format them", "dependsOn": ["task_1"]},
    ]
    models = script_run(llm, run_id, plan)
    started_at = time.monotonic()  # the run's keys get their expiry some time after this
    result = run_cli(llm, workers, run_id, team_file(tmp_path / "t.toml", models))

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"], out["team_id"], out["run_id"]) == (
        "completed",
        "final answer",
        "coord",
        run_id,
    )
    assert [t["id"] for t in out["plan"]["tasks"]] == ["task_1", "task_2"]
    assert out["plan"]["fallback"] is False and out["plan"]["raw_plan_text"] == json.dumps(plan)
    assert [
        (r["task_id"], r["member_id"], r["member_name"], r["output"]) for r in out["member_results"]
    ] == [
        ("task_1", "m1", "Member m1", "output of task_1"),
        ("task_2", "m2", "Member m2", "output of task_2"),
    ]
    assert statuses(out) == {"task_1": "completed", "task_2": "completed"}
    assert all(s["percent"] == 100 and s["attempts"] == 1 for s in out["task_states"])
    # 2 planner/synth calls + 2 member calls, 11 prompt / 7 completion tokens each.
    assert out["usage"]["prompt_tokens"] == 44 and out["usage"]["completion_tokens"] == 28
    planner_prompt = llm.prompts(f"plan-{run_id}")[0]
    assert "You are a team planner." in planner_prompt
    assert "- id=m1, name=Member m1, expertise=collecting facts" in planner_prompt
    assert planner_prompt.endswith("Objective:\nShip the thing")
    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", workers, "--json"])
    assert (status.exit_code, json.loads(status.stdout)) == (0, out)  # rebuilt from Redis alone
    # An ended run expires after the default retention (shared/runs/retention.py).
    assert_ttl_as_set(
        redis.Redis.from_url(workers), RunKeys(run_id).spec, RunOptions().retention_s, started_at
    )
    assert set(out) == {
        "team_id",
        "run_id",
        "objective",
        "status",
        "plan",
        "member_results",
        "task_states",
        "messages",
        "rounds",
        "output",
        "error",
        "synthesis",
        "total_duration_ms",
        "usage",
        "usage_by_model",
        "lineage",
        "forks",
    }
    assert (out["lineage"], out["forks"]) == (None, [])
    assert out["error"] is None
    # The synthesizer's raw response beside its text, and each member's transcript.
    assert out["synthesis"] == {
        "content": "final answer",
        "tool_calls": [],
        "usage": out["synthesis"]["usage"],
        "model": models["synth"],
    }
    assert out["synthesis"]["usage"]["prompt_tokens"] == 11
    first = out["member_results"][0]["transcript"]
    assert [m["role"] for m in first] == ["system", "user", "assistant"]  # no tool calls
    assert first[2]["model"] == models["member"]  # the stored transcript names who answered
    assert "Task ID: task_1" in first[1]["content"]
    assert first[2]["content"] == "output of task_1"


def test_independent_tasks_overlap_with_max_concurrency_2(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    seen: set[str] = set()

    def slow_first_call(body: dict[str, Any]) -> str | HttpError:
        # A 429 makes the worker back off (>= 0.25 s) while it holds the claim, so each task
        # lasts long enough to see whether the two ran at the same time.
        task_id = task_id_of(body)
        if task_id not in seen:
            seen.add(task_id)
            return HttpError(429, "slow down")
        return member_answer(body)

    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m2", "task": "B"},
        ]
    }
    models = script_run(llm, run_id, plan, member=slow_first_call)
    team = team_file(tmp_path / "t.toml", models, options={"max_concurrency": 2})
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rounds"] == 1
    a, b = board_of(workers, run_id).get("a"), board_of(workers, run_id).get("b")
    assert a.start_ms < b.end_ms and b.start_ms < a.end_ms


def test_non_json_planner_output_falls_back_to_one_task_per_member(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(llm, run_id, "Sorry, I would rather write prose.")
    result = run_cli(
        llm, workers, run_id, team_file(tmp_path / "t.toml", models), objective="Plan a picnic"
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["plan"]["fallback"] is True
    assert [(t["id"], t["member_id"], t["task"], t["context"]) for t in out["plan"]["tasks"]] == [
        (
            "fallback_1",
            "m1",
            "Focus on collecting facts. Objective: Plan a picnic",
            "planner_fallback",
        ),
        ("fallback_2", "m2", "Plan a picnic", "planner_fallback"),
        ("fallback_3", "m3", "Plan a picnic", "planner_fallback"),
    ]
    assert set(statuses(out).values()) == {"completed"}


def test_chain_takes_two_rounds_and_publishes_the_messages(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
        ]
    }
    models = script_run(llm, run_id, plan)
    result = run_cli(llm, workers, run_id, team_file(tmp_path / "t.toml", models))

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rounds"] == 2
    assert statuses(out) == {"a": "completed", "b": "completed"}
    types = [m["type"] for m in out["messages"]]
    assert types == ["task.assigned", "task.result", "task.assigned", "task.result", "run.complete"]


def test_the_coordinator_loads_the_scripts_once_on_its_connection(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store, board, bus, budget, lease and the final result share one Scripts: each script is
    registered once (the coordinator runs in this process; the workers are others)."""
    built: list[int] = []
    registered: list[tuple[int, str]] = []
    names = {hashlib.sha1(text.encode()).hexdigest(): name for name, text in sources().items()}
    build, register = Scripts.__init__, redis.Redis.register_script

    def counted_build(self: Scripts, conn: redis.Redis) -> None:
        built.append(id(conn))
        build(self, conn)

    def counted_register(self: redis.Redis, script: str) -> Any:
        registered.append((id(self), names.get(hashlib.sha1(script.encode()).hexdigest(), "")))
        return register(self, script)

    monkeypatch.setattr(Scripts, "__init__", counted_build)
    monkeypatch.setattr(redis.Redis, "register_script", counted_register)
    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
        ]
    }
    models = script_run(llm, run_id, plan)
    # A budget, and a plan approval (a wake-up and a message), so that every part does its bit.
    result = run_cli(
        llm,
        workers,
        run_id,
        team_file(tmp_path / "t.toml", models),
        "--max-tokens",
        "100000",
        "--require-plan-approval",
        "--approve-plan",
    )

    assert result.exit_code == 0, result.output
    assert len(built) == 1
    assert len(registered) == len(set(registered))
    assert {conn for conn, _ in registered} == set(built)
    assert {
        "create",
        "next_ready",
        "publish",
        "run_signal",
        "run_status",
        "run_finish",
        "snapshot_page",
    } <= {name for _, name in registered}


def test_one_model_for_planner_and_synthesizer(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    lead = llm.script(
        f"lead-{run_id}", [json.dumps([{"memberId": "m1", "task": "A"}]), "lead merged output"]
    )
    member = llm.script(f"member-{run_id}", handler=member_answer)
    team = team_file(tmp_path / "t.toml", {"planner": lead, "synth": lead, "member": member})
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["output"] == "lead merged output"
    prompts = llm.prompts(f"lead-{run_id}")
    assert len(prompts) == 2
    assert "You are a team planner." in prompts[0] and "You are the team lead." in prompts[1]
    assert "output: output of task_1" in prompts[1]


def test_cycle_blocks_both_tasks_with_zero_rounds(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = {
        "tasks": [
            {"id": "a", "memberId": "m1", "task": "A", "dependsOn": ["b"]},
            {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
        ]
    }
    models = script_run(llm, run_id, plan)
    result = run_cli(llm, workers, run_id, team_file(tmp_path / "t.toml", models))

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["rounds"], out["member_results"]) == ("failed", 0, [])
    assert statuses(out) == {"a": "blocked", "b": "blocked"}
    assert set(errors(out).values()) == {CYCLE}
    synth_prompt = llm.prompts(f"synth-{run_id}")[0]
    assert "Tasks that never ran:" in synth_prompt and f"- a (blocked): {CYCLE}" in synth_prompt
    assert llm.prompts(f"member-{run_id}") == []


def test_unknown_member_runs_on_the_first_member_with_a_warning(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(llm, run_id, [{"id": "a", "memberId": "Ghost", "task": "A"}])
    result = run_cli(llm, workers, run_id, team_file(tmp_path / "t.toml", models))

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["task_states"][0]["claimed_by"] == "m1"
    assert out["member_results"][0]["member_id"] == "m1"
    warnings = [m for m in out["messages"] if m["type"] == "run.warning"]
    assert len(warnings) == 1 and "'Ghost': routed to m1" in warnings[0]["content"]


def test_unknown_member_fails_the_task_and_blocks_dependents_when_configured(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [
        {"id": "a", "memberId": "Ghost", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan)
    result = run_cli(
        llm, workers, run_id, team_file(tmp_path / "t.toml", models), "--fail-on-unknown-member"
    )

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert statuses(out) == {"a": "failed", "b": "blocked"}
    assert errors(out) == {"a": "unknown team member: Ghost", "b": "dependency failed"}
    assert [(r["task_id"], r["member_id"], r["task_status"]) for r in out["member_results"]] == [
        ("a", "Ghost", "failed")
    ]
    assert not [m for m in out["messages"] if m["type"] == "task.assigned"]
    assert llm.prompts(f"member-{run_id}") == []


def test_serial_dispatch_runs_three_tasks_in_three_rounds(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [{"id": t, "memberId": "m1", "task": t} for t in ("a", "b", "c")]
    models = script_run(llm, run_id, plan)
    result = run_cli(
        llm, workers, run_id, team_file(tmp_path / "t.toml", models), "--no-parallel-dispatch"
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rounds"] == 3 and set(statuses(out).values()) == {"completed"}
    board = board_of(workers, run_id)
    a, b, c = (board.get(t) for t in ("a", "b", "c"))
    assert a.end_ms <= b.start_ms and b.end_ms <= c.start_ms


def test_max_rounds_one_blocks_the_second_task_of_a_chain(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan)
    result = run_cli(
        llm, workers, run_id, team_file(tmp_path / "t.toml", models), "--max-rounds", "1"
    )

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["rounds"] == 1
    assert statuses(out) == {"a": "completed", "b": "blocked"}
    assert errors(out)["b"] == "max rounds exceeded: 1"
    assert "- b (blocked): max rounds exceeded: 1" in llm.prompts(f"synth-{run_id}")[0]


def test_barrier_dispatch_waits_for_the_whole_round(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [{"id": t, "memberId": "m1", "task": t} for t in ("a", "b", "c")]
    models = script_run(llm, run_id, plan)
    team = team_file(
        tmp_path / "t.toml", models, options={"dispatch": "barrier", "max_concurrency": 2}
    )
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rounds"] == 2
    board = board_of(workers, run_id)
    a, b, c = (board.get(t) for t in ("a", "b", "c"))
    assert c.start_ms >= max(a.end_ms, b.end_ms)


def test_first_member_error_stops_the_run_without_synthesis(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    def fail_a(body: dict[str, Any]) -> str | HttpError:
        return HttpError(400, "member model refused") if task_id_of(body) == "a" else "fine"

    plan = [{"id": "a", "memberId": "m1", "task": "A"}, {"id": "b", "memberId": "m2", "task": "B"}]
    models = script_run(llm, run_id, plan, member=fail_a, synth=None)
    result = run_cli(
        llm,
        workers,
        run_id,
        team_file(tmp_path / "t.toml", models),
        "--no-continue-on-member-error",
        "--no-parallel-dispatch",
    )

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "failed" and out["output"] is None
    assert statuses(out) == {"a": "failed", "b": "blocked"}
    assert "member model refused" in errors(out)["a"]
    assert errors(out)["b"] == "not run: the run stopped after a member failure"
    assert llm.prompts(f"synth-{run_id}") == []
    failed = [m for m in out["messages"] if m["type"] == "run.failed"]
    assert failed and failed[0]["content"].startswith("team member failed: m1 -> ")


def test_spent_token_budget_pauses_dispatch_and_a_cancel_ends_the_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = [{"id": t, "memberId": "m1", "task": t} for t in ("a", "b", "c")]
    models = script_run(llm, run_id, plan, synth=None)
    conn = redis.Redis.from_url(workers, decode_responses=True)
    store = RunStore(conn, RunKeys(run_id))
    # The planner spends 18 tokens; the first member call's worst case (its prompt and 4096
    # output tokens) is not covered by the 12 left: it is not made, and the run pauses.
    done: list[Any] = []
    thread = threading.Thread(
        target=lambda: done.append(
            run_cli(
                llm,
                workers,
                run_id,
                team_file(tmp_path / "t.toml", models),
                "--max-tokens",
                "30",
                "--no-parallel-dispatch",
            )
        ),
        daemon=True,
    )
    thread.start()
    wait_until(
        lambda: store.exists() and store.state().status == "awaiting_budget",
        60,
        message="the run to pause on its budget",
    )
    board = {t.task_id: t.status.value for t in TaskBoard(conn, RunKeys(run_id)).snapshot()}
    assert board["a"] == "ready"  # given back, not failed
    assert llm.requests[f"member-{run_id}"] == []

    store.request_stop("cancelled")
    thread.join(60)

    [result] = done
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["output"]) == ("cancelled", None)
    assert set(statuses(out).values()) <= {"blocked", "cancelled", "ready", "pending"}
    paused = [m["content"] for m in out["messages"] if m["type"] == "run.awaiting_budget"]
    assert len(paused) == 1 and re.fullmatch(
        r"budget exceeded: 18 tokens used, the next call may take \d+, max_tokens is 30", paused[0]
    ), paused
    assert llm.prompts(f"synth-{run_id}") == []
