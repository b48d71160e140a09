"""Hooks named in the team file: every hook point fires, and a raising hook never stops the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from teamctl import SynthesisResult, TeamHook
from tests.support.cli import run_cli
from tests.support.llm import ScriptedLLM
from tests.support.replies import script_run
from tests.support.teamfile import team_file


class RecordingHook(TeamHook):
    """Records (hook point, detail) pairs; class-level so the test can read them."""

    calls: ClassVar[list[tuple[str, Any]]] = []
    transcripts: ClassVar[dict[str, Any]] = {}
    """What after_task saw of each task's transcript."""

    def before_plan(self, objective: str, members: Any, options: Any) -> None:
        self.calls.append(("before_plan", [m.id for m in members]))

    def after_plan(self, objective: str, plan: Any) -> None:
        self.calls.append(("after_plan", [t.id for t in plan.tasks]))

    def before_task(self, objective: str, task: Any, member: Any) -> None:
        self.calls.append(("before_task", (task.task_id, member.id)))

    def after_task(self, objective: str, result: Any) -> None:
        self.calls.append(("after_task", (result.task_id, result.task_status.value)))
        self.transcripts[result.task_id] = result.transcript

    def on_message(self, message: Any) -> None:
        self.calls.append(("on_message", message.type))

    def on_task_state_changed(
        self, objective: str, state: Any, member: Any, detail: str | None
    ) -> None:
        self.calls.append(("on_task_state_changed", state.task_id))

    def after_synthesis(self, objective: str, result: SynthesisResult) -> None:
        assert result.response.content == result.output and result.response.usage.prompt_tokens
        self.calls.append(("after_synthesis", result.output))


class RaisingHook:
    """Not a TeamHook subclass: any class with some hook methods will do."""

    def before_plan(self, *args: Any) -> None:
        raise RuntimeError("boom in before_plan")

    def after_task(self, *args: Any) -> None:
        raise ValueError("boom in after_task")


def test_hooks_fire_and_a_raising_hook_is_reported_not_fatal(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    RecordingHook.calls.clear()
    RecordingHook.transcripts.clear()
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan)
    team = team_file(
        tmp_path / "t.toml",
        models,
        hooks=["tests.runs.test_hooks:RaisingHook", "tests.runs.test_hooks:RecordingHook"],
    )
    result = run_cli(llm, workers, run_id, team)

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["status"] == "completed"
    hook_errors = [m["content"] for m in out["messages"] if m["type"] == "hook.error"]
    assert hook_errors == [
        "RaisingHook.before_plan raised RuntimeError: boom in before_plan",
        "RaisingHook.after_task raised ValueError: boom in after_task",
        "RaisingHook.after_task raised ValueError: boom in after_task",
    ]
    assert "hook failed: RaisingHook.before_plan raised RuntimeError" in result.stderr

    calls = RecordingHook.calls
    points = [point for point, _ in calls]
    assert calls[0] == ("before_plan", ["m1", "m2", "m3"])  # the raising hook ran first
    assert calls[1] == ("after_plan", ["a", "b"])
    # A worker publishes task.result just after completing the task, so the last task's message
    # may reach the bus after run.complete: only the order of our own two calls is fixed.
    assert calls.index(("after_synthesis", "final answer")) < calls.index(
        ("on_message", "run.complete")
    )
    assert [d for p, d in calls if p == "before_task"] == [("a", "m1"), ("b", "m2")]
    assert [d for p, d in calls if p == "after_task"] == [("a", "completed"), ("b", "completed")]
    # after_task gets the member result as the run's result holds it, transcript included.
    by_task = {r["task_id"]: r["transcript"] for r in out["member_results"]}
    assert RecordingHook.transcripts == by_task
    assert [m["role"] for m in by_task["a"]] == ["system", "user", "assistant"]
    assert by_task["a"][-1]["content"] == "output of a"
    assert len(points) - points[::-1].index("after_task") < points.index("after_synthesis")
    seen_types = {d for p, d in calls if p == "on_message"}
    assert {"task.assigned", "task.result"} <= seen_types and "hook.error" not in seen_types
    assert {d for p, d in calls if p == "on_task_state_changed"} == {"a", "b"}
