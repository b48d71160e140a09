"""The dispatch input: AI4J's sections in order, dependency outputs, and each include_* option."""

from __future__ import annotations

from teamctl.shared.envelopes import ENVELOPES
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.team_file import Member
from teamctl.worker.runs.task_prompt import build_dispatch_input

MEMBER = Member(id="writer", name="Writer", description="clear prose")
TASK = TaskState(
    task_id="write",
    task="Write it up",
    context="Keep it short",
    depends_on=["collect"],
    status=TaskStatus.IN_PROGRESS,
)
DEPENDENCY = TaskState(
    task_id="collect", task="Collect", output="fact " * 10, status=TaskStatus.COMPLETED
)
HISTORY = [
    ENVELOPES.validate_python(
        {"from": "m1", "to": "writer", "type": "peer.ask", "content": "ready?"}
    )
]


def render(**options: object) -> str:
    return build_dispatch_input(
        member=MEMBER,
        task=TASK,
        objective="Ship the report",
        options=RunOptions(**options),
        dependencies=[DEPENDENCY],
        history=HISTORY,
    )


def test_every_section_in_order() -> None:
    assert render(dependency_output_chars=9) == "\n".join(
        [
            "Team member role: Writer",
            "Expertise: clear prose",
            "Task ID: write",
            "Dependencies: [collect]",
            "Objective:",
            "Ship the report",
            "",
            "Assigned task:",
            "Write it up",
            "Additional context:",
            "Keep it short",
            "Dependency outputs:",
            "- collect (completed): fact fact [truncated]",
            "Recent team messages:",
            "- [peer.ask] m1 -> writer: ready?",
            "Return concise, high-signal output for the team lead.",
        ]
    )


def test_include_options_drop_their_sections() -> None:
    text = render(
        include_original_objective_in_dispatch=False,
        include_task_context_in_dispatch=False,
        include_message_history_in_dispatch=False,
    )
    assert "Objective:" not in text and "Additional context:" not in text
    assert "Recent team messages:" not in text
    assert "- collect (completed): " + "fact " * 9 + "fact" in text
    assert "Recent team messages:" not in render(enable_message_bus=False)
