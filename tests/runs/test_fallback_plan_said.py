"""A run whose planner's reply was not a plan says so, with why, in one line: on stderr when it
ends, in `teamctl status`, in `status --json` (`plan.fallback_reason`) and on its dashboard
page; a planned run says nothing of the kind."""

from __future__ import annotations

import json
from pathlib import Path

import markupsafe
import pytest
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.runs.plan_parser import why_no_tasks

from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM
from tests.support.replies import script_run
from tests.support.teamfile import team_file
from tests.support.web import served, signed_in

FELL_BACK = "; fell back to one task per member"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "it was empty"),
        ("  \n ", "it was empty"),
        ("Sorry, I would rather write prose.", "no JSON in it"),
        (
            'Here it is: {"tasks": [{"id": "a", "task": "A"},',
            "its JSON does not parse: Expecting value at line 1 column 49",
        ),
        (
            '{"tasks": [{"id": "a", "task": "A"} {"id": "b"}]}',
            "its JSON does not parse: Expecting ',' delimiter at line 1 column 37",
        ),
        ('{"tasks": []}', "no task with a text in its JSON"),
        ('[{"id": "a", "memberId": "m1"}]', "no task with a text in its JSON"),
    ],
)
def test_the_reason_is_a_few_words_of_ours(reply: str, reason: str) -> None:
    assert why_no_tasks(reply) == reason


def fallback_run(
    llm: ScriptedLLM, redis_url: str, run_id: str, tmp_path: Path, reply: str, *extra: str
) -> tuple[int, str, str]:
    """A run of m1..m3 on the shared workers whose planner answers `reply`; its exit code,
    stdout and stderr."""
    models = script_run(llm, run_id, reply)
    result = CliRunner().invoke(
        main,
        [
            "run",
            "Plan a picnic",
            "--team",
            str(team_file(tmp_path / "t.toml", models)),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_url,
            "--workers",
            "0",
            "--run-id",
            run_id,
            *extra,
        ],
    )
    return result.exit_code, result.stdout, result.stderr


def test_stderr_and_status_say_the_run_fell_back_and_why(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    code, stdout, stderr = fallback_run(
        llm, workers, run_id, tmp_path, "Sorry, I would rather write prose."
    )
    said = "the planner's reply was not a plan (no JSON in it)" + FELL_BACK

    assert (code, stdout) == (0, "final answer\n")
    lines = stderr.splitlines()
    summary = next(
        i
        for i, line in enumerate(lines)
        if line.startswith(f"teamctl: run {run_id} completed in 1 round, 3 tasks ran")
    )
    assert lines[summary + 1 :] == [f"teamctl: {said}"]

    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", workers])
    assert status.exit_code == 0, status.output
    assert status.stdout.splitlines()[1:3] == ["objective: Plan a picnic", said]
    assert status.stdout.count(FELL_BACK) == 1

    as_json = CliRunner().invoke(main, ["status", run_id, "--json", "--redis-url", workers])
    plan = json.loads(as_json.stdout)["plan"]
    assert (plan["fallback"], plan["fallback_reason"]) == (True, "no JSON in it")
    assert [t["id"] for t in plan["tasks"]] == ["fallback_1", "fallback_2", "fallback_3"]


def test_with_json_stdout_stays_the_object_and_stderr_says_it(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    code, stdout, stderr = fallback_run(llm, workers, run_id, tmp_path, '{"tasks": [}', "--json")

    assert code == 0, stderr
    assert (
        json.loads(stdout)["plan"]["fallback_reason"]
        == "its JSON does not parse: Expecting value at line 1 column 12"
    )
    assert stderr.splitlines()[-1] == (
        "teamctl: the planner's reply was not a plan (its JSON "
        "does not parse: Expecting value at line 1 column 12)" + FELL_BACK
    )


def test_the_run_page_says_it(llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path) -> None:
    code, _, stderr = fallback_run(llm, workers, run_id, tmp_path, "")
    assert code == 0, stderr
    said = "the planner's reply was not a plan (it was empty)" + FELL_BACK

    with served(workers) as base, signed_in(base) as client:
        for path in (f"/runs/{run_id}", f"/runs/{run_id}/body"):
            page = client.get(path)
            assert page.status_code == 200
            assert (
                f'<p class="fallback" id="plan-fallback">{markupsafe.escape(said)}</p>' in page.text
            )


def test_a_planned_run_says_nothing_of_a_fallback(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    plan = {"tasks": [{"id": "a", "memberId": "m1", "task": "A"}]}
    result = run_cli(
        llm, workers, run_id, team_file(tmp_path / "t.toml", script_run(llm, run_id, plan))
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["fallback_reason"] is None
    assert "planner's reply" not in result.stderr

    status = CliRunner().invoke(main, ["status", run_id, "--redis-url", workers])
    assert status.exit_code == 0 and "planner's reply" not in status.stdout
    with served(workers) as base, signed_in(base) as client:
        assert 'id="plan-fallback"' not in client.get(f"/runs/{run_id}").text
