"""An example hook for a team file (docs/guides/planned-runs.md): an audit trail of a run.

The coordinator builds `Audit()` and calls it in its own process, the `teamctl run` one: each
call writes one JSON line on stderr. JSON because task and member ids come from the planner
model: `json.dumps` escapes every control character, so no model text reaches a terminal raw."""

from __future__ import annotations

import json
import sys

from teamctl import MemberResult, Plan, SynthesisResult, TeamHook


class Audit(TeamHook):
    """Logs the plan, each task's outcome and the answer's length."""

    def after_plan(self, objective: str, plan: Plan) -> None:
        audit("plan", tasks=[task.id for task in plan.tasks])

    def after_task(self, objective: str, result: MemberResult) -> None:
        audit("task", task=result.task_id, member=result.member_id, status=result.task_status.value)

    def after_synthesis(self, objective: str, result: SynthesisResult) -> None:
        audit("answer", chars=len(result.output))


def audit(event: str, **fields: object) -> None:
    """One audit line on stderr."""
    print("audit:", json.dumps({"event": event, **fields}), file=sys.stderr, flush=True)
