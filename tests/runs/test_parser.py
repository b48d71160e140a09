"""The planner-output parser (AI4J's tolerated shapes) and plan normalization, as a table."""

from __future__ import annotations

import pytest
from teamctl.coordinator.runs.plan import normalize_tasks
from teamctl.coordinator.runs.plan_parser import parse_tasks

FENCED = """Here is the plan you asked for:
```json
{"tasks": [{"id": "a", "memberId": "m1", "task": "do a"},
           {"id": "b", "memberId": "m2", "task": "do b {with braces}", "dependsOn": ["a"]}]}
```
Good luck!"""


def rows(text: str | None) -> list[tuple[str, str | None, str, list[str]]]:
    """(id, member, task, deps) of each normalized task."""
    return [(t.id, t.member_id, t.task, t.depends_on) for t in normalize_tasks(parse_tasks(text))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            FENCED,
            [("a", "m1", "do a", []), ("b", "m2", "do b {with braces}", ["a"])],
            id="fenced-json-with-prose",
        ),
        pytest.param(
            '[{"assignee": "m1", "instruction": "x", "after": "a, b"}]',
            [("task_1", "m1", "x", ["a", "b"])],
            id="bare-array-aliases-after-string",
        ),
        pytest.param(
            '{"id": 1, "task": "x"}', [("task_1", None, "x", [])], id="numeric-id-auto-id"
        ),
        pytest.param(
            '{"plan": [{"id": "p", "member": "m2", "goal": "g"}]}',
            [("p", "m2", "g", [])],
            id="plan-key",
        ),
        pytest.param(
            '{"delegations": [{"taskId": "d", "agent": "m3", "work": "w"}]}',
            [("d", "m3", "w", [])],
            id="delegations-key",
        ),
        pytest.param(
            '{"assignments": [{"task_id": "s", "task": "t", "deps": ["x", 3, " "]}]}',
            [("s", None, "t", ["x"])],
            id="assignments-key-list-deps-keep-strings",
        ),
        pytest.param(
            '{"tasks": "not a list", "plan": [{"task": "t"}]}',
            [("task_1", None, "t", [])],
            id="skips-non-array-plan-keys",
        ),
        pytest.param('{"task": "", "instruction": "x"}', [], id="first-alias-present-wins-blank"),
        pytest.param('{"plan": {"tasks": [{"task": "t"}]}}', [], id="nested-plan-unsupported"),
        pytest.param('see [1] then {"task": "t"}', [], id="array-in-prose-comes-first"),
        pytest.param("no json at all", [], id="prose"),
        pytest.param("", [], id="empty"),
        pytest.param(None, [], id="none"),
        pytest.param(
            '[{"task": "t1"}, "junk", {"id": "Task 1!", "task": "t2"}, {"id": "task_1", '
            '"task": "t3", "notes": "n"}]',
            [
                ("task_1", None, "t1", []),
                ("task_1_2", None, "t2", []),
                ("task_1_3", None, "t3", []),
            ],
            id="normalize-and-dedupe-ids",
        ),
    ],
)
def test_parse_table(
    text: str | None, expected: list[tuple[str, str | None, str, list[str]]]
) -> None:
    assert rows(text) == expected


def test_context_and_string_escapes_in_extracted_json() -> None:
    text = 'Plan: {"tasks": [{"id": "q", "task": "say \\"}\\"", "details": "ctx"}]} trailing }'
    [task] = parse_tasks(text)
    assert (task.id, task.task, task.context) == ("q", 'say "}"', "ctx")
