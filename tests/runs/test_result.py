"""The result JSON's member_results come in dispatch order (AI4J), not in the order tasks ended."""

from __future__ import annotations

from teamctl.coordinator.runs.result import member_results
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.team_file import Member


def test_member_results_follow_dispatch_order() -> None:
    spec = RunSpec(
        run_id="r",
        team_id="t",
        objective="o",
        members=[Member(id="m1")],
        options=RunOptions(fail_on_unknown_member=True),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=0,
    )
    states = [  # plan order
        TaskState(
            task_id="slow_first",
            status=TaskStatus.COMPLETED,
            claimed_by="m1",
            start_ms=100,
            end_ms=900,
        ),
        TaskState(
            task_id="quick_second",
            status=TaskStatus.COMPLETED,
            claimed_by="m1",
            start_ms=200,
            end_ms=300,
        ),
        TaskState(
            task_id="unknown",
            member_id="ghost",
            status=TaskStatus.FAILED,
            error="unknown team member: ghost",
            end_ms=150,
        ),
        TaskState(task_id="never", status=TaskStatus.BLOCKED, end_ms=50),
    ]
    results = member_results(spec, states)
    assert [r.task_id for r in results] == ["slow_first", "unknown", "quick_second"]
    assert (results[1].member_id, results[1].error) == ("ghost", "unknown team member: ghost")
