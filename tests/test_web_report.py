"""`teamctl report --html` and the run view it shares with the dashboard, on a real Redis: the
attempts rebuilt from the events stream (worker per attempt, reclaim, stale write), one
self-contained file, model-written text escaped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import markupsafe
import pytest
import redis
from click.testing import CliRunner
from teamctl.coordinator.cli import main
from teamctl.coordinator.web import svg_dag
from teamctl.coordinator.web.run_data import load_run_view
from teamctl.shared.runs.handle import RunHandle

from tests.support.cli import assert_config_error, run_cli
from tests.support.llm import ScriptedLLM
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, timing_options
from tests.support.web import HOSTILE, finished_run


def test_each_attempt_names_its_worker_and_how_it_ended(conn: redis.Redis, run_id: str) -> None:
    finished_run(conn, run_id)
    view = load_run_view(RunHandle.existing(conn, run_id))
    seen = [(a.task_id, a.number, a.worker, a.outcome, a.stale_writes) for a in view.attempts]
    assert seen == [("a", 1, "hostA:101", "reclaimed", 1), ("a", 2, "hostB:202", "completed", 0),
                    ("b", 1, "hostB:202", "completed", 0)]
    assert all(a.end_ms is not None and a.end_ms >= a.start_ms for a in view.attempts)
    assert view.counts() == {"completed": 2}


def test_the_dag_puts_a_task_after_its_dependencies(conn: redis.Redis, run_id: str) -> None:
    finished_run(conn, run_id)
    dag = svg_dag.lay_out(RunHandle.existing(conn, run_id).board.snapshot())
    x = {node.task.task_id: node.x for node in dag.nodes}
    assert x["a"] < x["b"]
    assert [(e.source, e.target) for e in dag.edges] == [("a", "b")]


def test_report_is_one_self_contained_file_with_model_text_escaped(
        redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path) -> None:
    finished_run(conn, run_id)
    path = tmp_path / "run.html"
    result = CliRunner().invoke(main, ["report", run_id, "--html", str(path),
                                       "--redis-url", redis_url])
    assert result.exit_code == 0, result.output
    html = path.read_text(encoding="utf-8")
    assert "<script" not in html.lower()  # readable without scripts; nothing a model wrote runs
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)  # nothing fetched
    assert "http://" not in html and "https://" not in html
    assert "<style>" in html and "<svg class=\"dag\"" in html and "<svg class=\"timeline\"" in html
    escaped = str(markupsafe.escape(HOSTILE))
    assert html.count(escaped) == 4  # the objective, the output of `a`, the message, transcript
    assert "transcript (3 messages)" in html and "the facts " in html
    # One bar per attempt: two for `a` (the reclaimed one marked), one for `b`.
    assert len(re.findall(r'class="bar o-', html)) == 3
    assert 'data-task="a" data-attempt="1"' in html and 'data-task="a" data-attempt="2"' in html
    assert html.count('class="mark reclaim"') == 1 and html.count('class="mark stale"') == 1
    assert "hostA:101" in html and "hostB:202" in html


def test_report_refuses_to_overwrite_a_file_without_force(
        redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path) -> None:
    finished_run(conn, run_id)
    path = tmp_path / "run.html"
    path.write_text("keep me", encoding="utf-8")
    args = ["report", run_id, "--html", str(path), "--redis-url", redis_url]
    assert_config_error(CliRunner().invoke(main, args), "pass --force")
    assert path.read_text(encoding="utf-8") == "keep me"
    assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0
    assert "hostB:202" in path.read_text(encoding="utf-8")


def test_report_of_an_unknown_run_is_one_line(redis_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "nosuchrun", "--html",
                                       str(tmp_path / "x.html"), "--redis-url", redis_url])
    assert_config_error(result, "teamctl runs")
    assert not (tmp_path / "x.html").exists()


@pytest.mark.realistic
def test_report_of_a_real_run_puts_each_attempt_on_its_worker(
        llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path) -> None:
    """A run through real RQ workers and the litellm client (scaled latencies; real ones in the
    realistic tier): every attempt is drawn once, on the lane of the worker process that made
    it, and the members' transcripts are in the file."""
    plan = [{"id": "a", "memberId": "m1", "task": "A"},
            {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]}]
    models = {"planner": llm.script(f"plan-{run_id}", [json.dumps(plan)], latency_s=scaled(3)),
              "member": llm.script(f"member-{run_id}", handler=member_answer,
                                   latency_s=scaled(4)),
              "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(2))}
    team = team_file(tmp_path / "team.toml", models, options=timing_options())
    result = run_cli(llm, workers, run_id, team)
    assert result.exit_code == 0, result.output

    path = tmp_path / "run.html"
    report = CliRunner().invoke(main, ["report", run_id, "--html", str(path),
                                       "--redis-url", workers])
    assert report.exit_code == 0, report.output
    html = path.read_text(encoding="utf-8")
    conn = redis.Redis.from_url(workers, decode_responses=True)
    view = load_run_view(RunHandle.existing(conn, run_id))
    assert [(a.task_id, a.outcome) for a in view.attempts] == [("a", "completed"),
                                                               ("b", "completed")]
    tasks = {t.task_id: t for t in view.tasks}
    for attempt in view.attempts:
        assert attempt.worker == tasks[attempt.task_id].worker  # the claim's host:pid
        assert re.fullmatch(r"[^:]+:\d+", attempt.worker)
        assert f'data-task="{attempt.task_id}" data-attempt="1"' in html
    assert len(re.findall(r'class="bar o-completed"', html)) == 2
    assert "output of a" in html and "transcript (" in html
    conn.close()
