"""What a person sees: the live table, and the plan approval prompt on a terminal."""

from __future__ import annotations

import io

import pytest
import redis
from rich.console import Console
from teamctl.coordinator.runs.approval import ApprovalMode, obtain_plan_decision
from teamctl.coordinator.runs.progress import _table
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import Plan, TaskSpec, TaskState, TaskStatus

from tests.support.runs import two_task_run


def test_live_table_shows_task_member_status_attempts_elapsed() -> None:
    states = [
        TaskState(
            task_id="a",
            member_id="m1",
            claimed_by="m1",
            status=TaskStatus.COMPLETED,
            attempts=1,
            start_ms=1_000,
            end_ms=3_500,
        ),
        TaskState(task_id="b", member_id="m2", status=TaskStatus.PENDING),
    ]
    console = Console(record=True, width=80, file=io.StringIO())
    console.print(_table(states))
    lines = [line.split() for line in console.export_text().splitlines() if line.strip()]
    assert lines == [
        ["task", "member", "status", "attempts", "elapsed"],
        ["a", "m1", "completed", "1", "2.5s"],
        ["b", "m2", "pending", "0", "-"],
    ]


@pytest.mark.parametrize(
    ("answer", "expected"),
    [("y\n", ("approved", None)), ("n\n", ("rejected", "rejected at the terminal"))],
)
def test_terminal_prompt_records_the_decision(
    conn: redis.Redis,
    run_id: str,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
    expected: tuple[str, str | None],
) -> None:
    two_task_run(conn, run_id, tmp_path, require_plan_approval=True)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    plan = Plan(tasks=[TaskSpec(id="a", member_id="m1", task="Do A")])
    decision = obtain_plan_decision(
        RunStore(conn, RunKeys(run_id)),
        plan,
        ApprovalMode.PROMPT,
        notify=print,
        should_stop=lambda: False,
    )
    assert decision.approved is (expected[0] == "approved")
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.approval, state.approval_reason) == expected
    assert "a -> m1: Do A" in capsys.readouterr().err
