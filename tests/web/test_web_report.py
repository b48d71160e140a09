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
from hypothesis import given
from hypothesis import strategies as st
from teamctl.coordinator.cli import main
from teamctl.coordinator.web import svg_dag
from teamctl.coordinator.web.run_page_data import load_run_view
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.task_records import TaskState

from tests.support.cli import assert_config_error, run_cli
from tests.support.llm import ScriptedLLM
from tests.support.replies import member_answer
from tests.support.teamfile import team_file
from tests.support.timescale import scaled, timing_options
from tests.support.web import HOSTILE, chain, finished_run, start_run

CHAIN = 10_000


def test_each_attempt_names_its_worker_and_how_it_ended(conn: redis.Redis, run_id: str) -> None:
    finished_run(conn, run_id)
    view = load_run_view(RunHandle.existing(conn, run_id))
    seen = [(a.task_id, a.number, a.worker, a.outcome, a.stale_writes) for a in view.attempts]
    assert seen == [
        ("a", 1, "hostA:101", "reclaimed", 1),
        ("a", 2, "hostB:202", "completed", 0),
        ("b", 1, "hostB:202", "completed", 0),
    ]
    assert all(a.end_ms is not None and a.end_ms >= a.start_ms for a in view.attempts)
    assert view.counts() == {"completed": 2}


def test_the_dag_puts_a_task_after_its_dependencies(conn: redis.Redis, run_id: str) -> None:
    finished_run(conn, run_id)
    dag = svg_dag.lay_out(RunHandle.existing(conn, run_id).board.snapshot())
    x = {node.task.task_id: node.x for node in dag.nodes}
    assert x["a"] < x["b"]
    assert [(e.source, e.target) for e in dag.edges] == [("a", "b")]


@st.composite
def plans(draw: st.DrawFn) -> list[TaskState]:
    """A DAG of up to 60 tasks in any order, some dependencies not on the board, some twice."""
    size = draw(st.integers(0, 60))
    ids = [f"t{i}" for i in range(size)]
    tasks = [
        TaskState(
            task_id=ids[i],
            depends_on=draw(st.lists(st.sampled_from([*ids[:i], "gone"]), max_size=3)),
        )
        for i in range(size)
    ]
    return draw(st.permutations(tasks))


@given(plans())
def test_each_task_sits_one_column_past_its_deepest_dependency(tasks: list[TaskState]) -> None:
    depth = svg_dag.depths(tasks)
    for task in tasks:
        deps = [depth[d] for d in task.depends_on if d in depth]
        assert depth[task.task_id] == (1 + max(deps) if deps else 0)
    nodes = {n.task.task_id: n for n in svg_dag.lay_out(tasks).nodes}
    step = svg_dag.NODE_W + svg_dag.GAP_X
    for task_id, node in nodes.items():
        assert node.x == svg_dag.MARGIN + depth[task_id] % svg_dag.BAND_COLUMNS * step


def test_a_cycle_is_drawn_once_not_followed_forever() -> None:
    tasks = [
        TaskState(task_id="a", depends_on=["b"]),
        TaskState(task_id="b", depends_on=["a"]),
        TaskState(task_id="c", depends_on=["b", "c"]),
    ]
    assert svg_dag.depths(tasks) == {"a": 0, "b": 1, "c": 2}
    assert len(svg_dag.lay_out(tasks).nodes) == 3


def test_a_plan_deeper_than_a_band_wraps_down_the_page() -> None:
    """45 columns: three bands of up to 20, one below the other; the edge that wraps runs
    along the gap under its band and drops onto the next band's first task from above."""
    tasks = [
        TaskState(task_id=f"c{i}", depends_on=[f"c{i - 1}"] if i > 1 else [])
        for i in range(45, 0, -1)
    ]
    dag = svg_dag.lay_out(tasks)
    nodes = {n.task.task_id: n for n in dag.nodes}
    assert nodes["c1"].x == nodes["c21"].x == nodes["c41"].x == svg_dag.MARGIN
    assert nodes["c1"].y < nodes["c21"].y < nodes["c41"].y
    assert nodes["c20"].x + svg_dag.NODE_W + svg_dag.GAP_X // 2 <= dag.width
    assert dag.height == nodes["c41"].y + svg_dag.NODE_H + svg_dag.MARGIN
    [wrap] = [e for e in dag.edges if e.target == "c21"]
    assert wrap.path.endswith(f"H{nodes['c21'].x + svg_dag.NODE_W // 2} V{nodes['c21'].y}")
    assert (
        nodes["c20"].y + svg_dag.NODE_H < int(wrap.path.split(" V")[1].split()[0]) < nodes["c21"].y
    )


def test_a_chain_of_ten_thousand_tasks_listed_dependents_first_is_reported(
    redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """The layout walks the chain from its far end without recursion, so no depth limit; the
    graph wraps into bands down the page, not millions of pixels across; the report still
    details every task."""
    start_run(conn, run_id, tasks=chain(CHAIN))
    path = tmp_path / "run.html"
    result = CliRunner().invoke(
        main, ["report", run_id, "--html", str(path), "--redis-url", redis_url]
    )
    assert result.exit_code == 0, result.output
    html = path.read_text(encoding="utf-8")
    svg = html.split('<svg class="dag"')[1].split("</svg>")[0]
    assert svg.count('<g class="node ') == CHAIN and svg.count('class="edge"') == CHAIN - 1
    assert int(re.match(r' width="(\d+)"', svg).group(1)) < 5000  # type: ignore[union-attr]
    assert html.count('<section class="task"') == CHAIN


def test_report_is_one_self_contained_file_with_model_text_escaped(
    redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    finished_run(conn, run_id)
    path = tmp_path / "run.html"
    result = CliRunner().invoke(
        main, ["report", run_id, "--html", str(path), "--redis-url", redis_url]
    )
    assert result.exit_code == 0, result.output
    html = path.read_text(encoding="utf-8")
    assert "<script" not in html.lower()  # readable without scripts; nothing a model wrote runs
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)  # nothing fetched
    assert "http://" not in html and "https://" not in html
    assert "<style>" in html and '<svg class="dag"' in html and '<svg class="timeline"' in html
    escaped = str(markupsafe.escape(HOSTILE))
    assert html.count(escaped) == 4  # the objective, the output of `a`, the message, transcript
    assert "transcript (3 messages)" in html and "the facts " in html
    # One bar per attempt: two for `a` (the reclaimed one marked), one for `b`.
    assert len(re.findall(r'class="bar o-', html)) == 3
    assert 'data-task="a" data-attempt="1"' in html and 'data-task="a" data-attempt="2"' in html
    assert html.count('class="mark reclaim"') == 1 and html.count('class="mark stale"') == 1
    assert "hostA:101" in html and "hostB:202" in html


def test_report_refuses_to_overwrite_a_file_without_force(
    redis_url: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    finished_run(conn, run_id)
    path = tmp_path / "run.html"
    path.write_text("keep me", encoding="utf-8")
    args = ["report", run_id, "--html", str(path), "--redis-url", redis_url]
    assert_config_error(CliRunner().invoke(main, args), "pass --force")
    assert path.read_text(encoding="utf-8") == "keep me"
    assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0
    assert "hostB:202" in path.read_text(encoding="utf-8")


def test_report_of_an_unknown_run_is_one_line(redis_url: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["report", "nosuchrun", "--html", str(tmp_path / "x.html"), "--redis-url", redis_url]
    )
    assert_config_error(result, "teamctl runs")
    assert not (tmp_path / "x.html").exists()


@pytest.mark.realistic
def test_report_of_a_real_run_puts_each_attempt_on_its_worker(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    """A run through real RQ workers and the litellm client (scaled latencies; real ones in the
    realistic tier): every attempt is drawn once, on the lane of the worker process that made
    it, and the members' transcripts are in the file."""
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = {
        "planner": llm.script(f"plan-{run_id}", [json.dumps(plan)], latency_s=scaled(3)),
        "member": llm.script(f"member-{run_id}", handler=member_answer, latency_s=scaled(4)),
        "synth": llm.script(f"synth-{run_id}", ["the answer"], latency_s=scaled(2)),
    }
    team = team_file(tmp_path / "team.toml", models, options=timing_options())
    result = run_cli(llm, workers, run_id, team)
    assert result.exit_code == 0, result.output

    path = tmp_path / "run.html"
    report = CliRunner().invoke(
        main, ["report", run_id, "--html", str(path), "--redis-url", workers]
    )
    assert report.exit_code == 0, report.output
    html = path.read_text(encoding="utf-8")
    conn = redis.Redis.from_url(workers, decode_responses=True)
    view = load_run_view(RunHandle.existing(conn, run_id))
    assert [(a.task_id, a.outcome) for a in view.attempts] == [
        ("a", "completed"),
        ("b", "completed"),
    ]
    tasks = {t.task_id: t for t in view.tasks}
    for attempt in view.attempts:
        assert attempt.worker == tasks[attempt.task_id].worker  # the claim's host:pid
        assert re.fullmatch(r"[^:]+:\d+", attempt.worker)
        assert f'data-task="{attempt.task_id}" data-attempt="1"' in html
    assert len(re.findall(r'class="bar o-completed"', html)) == 2
    assert "output of a" in html and "transcript (" in html
    conn.close()
