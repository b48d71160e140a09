"""`teamctl replay` and `teamctl fork` on real workers and Redis with the scripted model server:
what each new run asks the server (counted per model), which tools really run (a tool that
appends to a file proves it), which outputs it keeps and what it says where the current code
parts from the recorded run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.lineage_records import LineageRecords

from tests.support.cli import assert_config_error
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teamfile import team_file
from tests.support.web import served, signed_in

TOOL = "tests.pytools_fixture.tools:count_step"
PLAN = {
    "tasks": [
        {"id": "t1", "memberId": "m1", "task": "Gather"},
        {"id": "t2", "memberId": "m2", "task": "Shape", "dependsOn": ["t1"]},
        {"id": "t3", "memberId": "m1", "task": "Check", "dependsOn": ["t2"]},
        {"id": "t4", "memberId": "m2", "task": "Aside"},
    ]
}
"""t1 -> t2 -> t3, and t4 on its own."""


class Member:
    """Each task: step 1 calls count_step (a line in `log`), step 2 answers, naming who did it."""

    def __init__(self, tag: str, log: Path) -> None:
        self.tag = tag
        self.log = log

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        dispatch = next(m["content"] for m in body["messages"] if m["role"] == "user")
        task_id = re.search(r"^Task ID: (\S+)", dispatch, re.M)
        assert task_id is not None
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return ToolCalls([("count_step", {"path": str(self.log), "step": 1})])
        return f"{self.tag} did {task_id.group(1)}"


def write_team(
    llm: ScriptedLLM,
    tmp_path: Path,
    name: str,
    log: Path,
    *,
    m1_tools: bool = True,
    m1_name: str = "Member m1",
) -> tuple[Path, dict[str, str]]:
    """The team and its scripted models (planner, m1, m2, synthesizer), by role."""
    models = {
        "planner": llm.script(f"plan-{name}", handler=lambda body: json.dumps(PLAN)),
        "m1": llm.script(f"m1-{name}", handler=Member("m1", log)),
        "m2": llm.script(f"m2-{name}", handler=Member("m2", log)),
        "synth": llm.script(f"synth-{name}", handler=lambda body: "the synthesis"),
    }
    members = [
        {"id": "m1", "name": m1_name, "model": models["m1"], "tools": [TOOL] if m1_tools else []},
        {"id": "m2", "model": models["m2"], "tools": [TOOL]},
    ]
    path = team_file(
        tmp_path / f"{name}.toml",
        models,
        members=members,
        options={"enable_member_team_tools": False},
    )
    return path, models


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def source_run(
    llm: ScriptedLLM, redis_url: str, tmp_path: Path, run_id: str, *extra: str
) -> dict[str, str]:
    """A completed run of the team; its scripted models by role."""
    log = tmp_path / "tool.log"
    team, models = write_team(llm, tmp_path, run_id, log)
    result = cli(
        "run", "Make the thing", "--team", str(team), "--api-base", llm.api_base,
        "--redis-url", redis_url, "--workers", "0", "--run-id", run_id, "--json", *extra,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert log.read_text().count("1\n") == 4  # each task's tool ran once
    return models


def requests_per_model(llm: ScriptedLLM, models: dict[str, str]) -> dict[str, int]:
    return {role: len(llm.requests[m.removeprefix("openai/")]) for role, m in models.items()}


def outputs(out: dict[str, Any]) -> dict[str, str]:
    return {r["task_id"]: r["output"] for r in out["member_results"]}


def test_a_replay_makes_no_model_call_runs_no_tool_and_equals_its_source(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    source = json.loads(cli("status", run_id, "--redis-url", workers, "--json").stdout)
    asked = requests_per_model(llm, models)

    result = cli(
        "replay",
        run_id,
        "--redis-url",
        workers,
        "--workers",
        "0",
        "--run-id",
        f"{run_id}-r",
        "--json",
    )

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert requests_per_model(llm, models) == asked  # not one request more, to any model
    assert (tmp_path / "tool.log").read_text().count("1\n") == 4  # no tool ran again
    assert out["status"] == "completed"
    assert out["output"] == source["output"] == "the synthesis"
    assert outputs(out) == outputs(source)
    assert out["usage"]["prompt_tokens"] == 0
    conn = redis.Redis.from_url(workers, decode_responses=True)
    replay = RunHandle.existing(conn, f"{run_id}-r")
    assert replay.spec.lineage is not None and replay.spec.lineage.text() == f"replay of {run_id}"
    assert LineageRecords(conn, RunKeys(run_id)).forks() == [f"{run_id}-r"]
    # Every step taken from the records: 2 per task, the planner's and the synthesizer's.
    assert sum(t.replayed_steps for t in replay.board.snapshot()) == 8
    assert LineageRecords(conn, replay.keys).reused_calls() == 2
    status = cli("status", f"{run_id}-r", "--redis-url", workers)
    assert f"lineage: replay of {run_id}" in status.stdout.splitlines()
    assert f"replays and forks: {run_id}-r" in cli("status", run_id, "--redis-url", workers).stdout
    # The pages link both ways; the report names the other run without a link.
    with served(workers) as base, signed_in(base) as client:
        page = client.get(f"/runs/{run_id}-r").text
        assert f'replay of <a href="/runs/{run_id}"><code>{run_id}</code></a>' in page
        page = client.get(f"/runs/{run_id}").text
        assert f'replays and forks: <a href="/runs/{run_id}-r"><code>{run_id}-r</code></a>' in page
    report = tmp_path / "report.html"
    made = cli("report", f"{run_id}-r", "--html", str(report), "--redis-url", workers)
    assert made.exit_code == 0, made.output
    assert f"replay of <code>{run_id}</code>" in report.read_text()


def test_a_replay_whose_tool_is_gone_stops_where_it_diverged(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    asked = requests_per_model(llm, models)
    changed, _ = write_team(llm, tmp_path, f"{run_id}-x", tmp_path / "x.log", m1_tools=False)

    result = cli(
        "replay", run_id, "--team", str(changed), "--redis-url", workers, "--workers", "0",
        "--run-id", f"{run_id}-r", "--json",
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "failed"
    assert "diverged at task t1, step 1: the tool 'count_step' it called is gone" in out["error"]
    assert out["task_states"][0]["error"].startswith("diverged at task t1, step 1:")
    assert requests_per_model(llm, models) == asked
    assert (tmp_path / "tool.log").read_text().count("1\n") == 4


def test_a_fork_at_a_step_reuses_what_does_not_depend_on_it(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    asked = requests_per_model(llm, models)
    new_m2 = llm.script(f"m2new-{run_id}", handler=Member("m2new", tmp_path / "tool.log"))

    result = cli(
        "fork", run_id, "--at", "t2:2", "--member-model", f"m2={new_m2}",
        "--redis-url", workers, "--workers", "0", "--run-id", f"{run_id}-f", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    made = {role: n - asked[role] for role, n in requests_per_model(llm, models).items()}
    # t2's step 2 on the new model, t3's two steps (it depends on t2), the synthesis: no more.
    assert made == {"planner": 0, "m1": 2, "m2": 0, "synth": 1}
    assert len(llm.requests[new_m2.removeprefix("openai/")]) == 1
    assert outputs(out) == {
        "t1": "m1 did t1",  # kept
        "t2": "m2new did t2",  # its first step replayed, then the new model
        "t3": "m1 did t3",  # run again
        "t4": "m2 did t4",  # kept
    }
    # A kept task's transcript is its source's.
    kept = cli("transcript", f"{run_id}-f", "t1", "--redis-url", workers, "--json")
    source_transcript = cli("transcript", run_id, "t1", "--redis-url", workers, "--json")
    assert kept.exit_code == 0 and kept.stdout == source_transcript.stdout
    # t3's tool ran again; t2's recorded call did not.
    assert (tmp_path / "tool.log").read_text().count("1\n") == 5
    diff = cli("diff", run_id, f"{run_id}-f", "--redis-url", workers, "--json")
    assert diff.exit_code == 0, diff.output
    compared = json.loads(diff.stdout)
    assert compared["changed"] == [] and [
        t["task_id"] for t in compared["tasks"] if t["same_output"] is False
    ] == ["t2"]
    # t1's and t4's two steps each, t2's first, and the plan.
    assert compared["b"]["reused_calls"] == 6
    # The fork's records are whole: a replay of it pays for nothing and ends the same.
    asked = requests_per_model(llm, models)
    replay = cli(
        "replay", f"{run_id}-f", "--redis-url", workers, "--workers", "0", "--json",
    )  # fmt: skip
    assert replay.exit_code == 0, replay.output
    assert outputs(json.loads(replay.stdout)) == outputs(out)
    assert requests_per_model(llm, models) == asked
    assert len(llm.requests[new_m2.removeprefix("openai/")]) == 1


def test_a_fork_at_plan_pays_for_everything_again(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    asked = requests_per_model(llm, models)

    result = cli(
        "fork", run_id, "--objective", "Make the thing again", "--redis-url", workers,
        "--workers", "0", "--run-id", f"{run_id}-p", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    made = {role: n - asked[role] for role, n in requests_per_model(llm, models).items()}
    assert made == {"planner": 1, "m1": 4, "m2": 4, "synth": 1}
    assert (
        "Make the thing again"
        in llm.requests[models["planner"].removeprefix("openai/")][-1]["messages"][-1]["content"]
    )
    assert (tmp_path / "tool.log").read_text().count("1\n") == 8


def test_a_dry_run_says_what_a_fork_reuses_and_starts_nothing(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    source_run(llm, workers, tmp_path, run_id)

    result = cli("fork", run_id, "--at", "t2:2", "--redis-url", workers, "--dry-run")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"forked from {run_id} at t2:2 (dry run: nothing started)"
    assert "t1: output kept (no call)" in lines and "t4: output kept (no call)" in lines
    assert "t2: 1 step replayed, then live (paid)" in lines
    assert "t3: live (paid)" in lines
    assert lines[-1].startswith("model calls reused: 6; estimated cost:")
    conn = redis.Redis.from_url(workers, decode_responses=True)
    assert LineageRecords(conn, RunKeys(run_id)).forks() == []


def test_bad_fork_points_are_one_line_errors(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    source_run(llm, workers, tmp_path, run_id)
    for at, says in (
        ("t9", "has no task 't9' (its tasks: t1, t2, t3, t4)"),
        ("t2:9", "task t2 of run"),
        ("t2:x", "is not a fork point"),
    ):
        result = cli("fork", run_id, "--at", at, "--redis-url", workers, "--dry-run")
        assert_config_error(result, says)
    result = cli("fork", run_id, "--option", "no_such=1", "--redis-url", workers, "--dry-run")
    assert_config_error(result, "--option no_such: no such option")
    result = cli("fork", run_id, "--member-model", "m9=x", "--redis-url", workers, "--dry-run")
    assert_config_error(result, "no member 'm9' in the forked team")


def test_a_fork_past_a_cut_journal_says_what_it_pays_again(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    source_run(llm, workers, tmp_path, run_id, "--journal-max-bytes", "50")

    result = cli("fork", run_id, "--at", "t2:2", "--redis-url", workers, "--dry-run")

    assert result.exit_code == 0, result.output
    assert (
        "t2: 0 steps replayed, then live (paid); the journal of t2 was cut at "
        "journal_max_bytes after 0 steps: the steps after it are paid for again"
    ) in result.stdout.splitlines()


def test_a_replay_that_parts_at_the_synthesis_says_so_and_prints_its_result(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    asked = requests_per_model(llm, models)
    # The synthesis prompt names each member: a renamed one makes another prompt.
    renamed, _ = write_team(llm, tmp_path, f"{run_id}-x", tmp_path / "x.log", m1_name="Renamed")

    result = cli(
        "replay", run_id, "--team", str(renamed), "--redis-url", workers, "--workers", "0",
        "--json",
    )  # fmt: skip

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "failed" and out["output"] is None
    assert out["error"] == (
        "diverged at synthesis: the synthesizer's prompt is not the recorded one "
        "(a task's output or the synthesis prompt changed)"
    )
    assert requests_per_model(llm, models) == asked


def test_a_replay_stops_where_a_cut_journal_ends(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id, "--journal-max-bytes", "50")
    asked = requests_per_model(llm, models)

    result = cli("replay", run_id, "--redis-url", workers, "--workers", "0", "--json")

    assert result.exit_code == 1, result.output
    assert re.search(
        r"diverged at task t[14], step 1: its journal was cut at journal_max_bytes after 0 "
        r"step\(s\)",
        json.loads(result.stdout)["error"],
    )
    assert "a replay stops there" in result.stderr
    assert requests_per_model(llm, models) == asked
    assert (tmp_path / "tool.log").read_text().count("1\n") == 4


def test_a_fork_never_writes_over_another_run(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    source_run(llm, workers, tmp_path, run_id)
    result = cli("fork", run_id, "--at", "t2", "--redis-url", workers, "--run-id", run_id)
    assert_config_error(result, f"run {run_id} already exists; pass another --run-id")
    conn = redis.Redis.from_url(workers, decode_responses=True)
    assert not conn.exists(RunKeys(run_id).reuse)
    for at in ("t2:00", "t2:\u00b2", "t2:-1"):
        assert_config_error(
            cli("fork", run_id, "--at", at, "--redis-url", workers, "--dry-run"),
            "is not a fork point",
        )
    assert_config_error(
        cli("fork", run_id, "--member-model", "m1", "--redis-url", workers, "--dry-run"),
        "--member-model 'm1': give MEMBER=MODEL",
    )


def test_a_fork_without_a_journal_of_its_own_still_replays_its_source_steps(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = source_run(llm, workers, tmp_path, run_id)
    asked = requests_per_model(llm, models)
    new_m2 = llm.script(f"m2new-{run_id}", handler=Member("m2new", tmp_path / "tool.log"))

    result = cli(
        "fork", run_id, "--at", "t2:2", "--member-model", f"m2={new_m2}",
        "--option", "journal_max_bytes=0", "--redis-url", workers, "--workers", "0", "--json",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert outputs(json.loads(result.stdout))["t2"] == "m2new did t2"
    # t2's first step came from the source's journal: only its second was asked for.
    assert len(llm.requests[new_m2.removeprefix("openai/")]) == 1
    made = {role: n - asked[role] for role, n in requests_per_model(llm, models).items()}
    assert made == {"planner": 0, "m1": 2, "m2": 0, "synth": 1}
