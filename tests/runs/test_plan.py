"""Plan normalization: AI4J's id table and the cases it was built from."""

from __future__ import annotations

import pytest
from teamctl.coordinator.runs.plan import (
    MAX_BASE_ID_CHARS,
    RawTask,
    normalize_dependencies,
    normalize_tasks,
)


def ids(raw_ids: list[str | None]) -> list[str]:
    return [t.id for t in normalize_tasks([RawTask(id=i, task="x") for i in raw_ids])]


@pytest.mark.parametrize(
    ("raw_ids", "expected"),
    [
        (["a", "a", "a"], ["a", "a_1", "a_2"]),
        ([None, None], ["task_1", "task_2"]),
        (["a", "a", None], ["a", "a_1", "task_2"]),
        (["task_1", None], ["task_1", "task_1_2"]),
        (["a", "a_1", "a"], ["a", "a_1", "a_1_2"]),
        ([None, "A", None, "a"], ["task_1", "a", "task_2", "a_3"]),
        (["!!!", "???"], ["task_1", "task_2"]),
        (["研究", "研究"], ["task_1", "task_2"]),
        (["", "   "], ["task_1", "task_2"]),
    ],
)
def test_ids_are_assigned_and_deduplicated_with_one_counter(
    raw_ids: list[str | None], expected: list[str]
) -> None:
    assert ids(raw_ids) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Collect Facts ", "collect_facts"),
        ("Task#1!!", "task_1"),
        ("__x__", "x"),
        ("A--B", "a--b"),
        ("--lead--", "--lead--"),
        ("a.b/c", "a_b_c"),
        ("x y  z", "x_y_z"),
        ("Ünïcode", "n_code"),
    ],
)
def test_single_id_normalization_table(raw: str, expected: str) -> None:
    assert ids([raw]) == [expected]


def test_dependencies_are_normalized_with_blanks_and_duplicates_dropped() -> None:
    deps = normalize_dependencies(["Collect Facts", " ", None, "collect_facts", "***", "B", "b "])
    assert deps == ["collect_facts", "b"]


def test_dependencies_are_not_remapped_to_renamed_duplicates() -> None:
    tasks = normalize_tasks(
        [
            RawTask(id="a", task="1"),
            RawTask(id="a", task="2"),
            RawTask(id="c", task="3", depends_on=["A", "a", "c"]),
        ]
    )
    assert [(t.id, t.depends_on) for t in tasks] == [("a", []), ("a_1", []), ("c", ["a", "c"])]


def test_fields_other_than_ids_are_kept_as_written() -> None:
    [task] = normalize_tasks([RawTask(id="X", member_id=" M1 ", task=" do it ", context="ctx")])
    assert (task.id, task.member_id, task.task, task.context, task.depends_on) == (
        "x",
        " M1 ",
        " do it ",
        "ctx",
        [],
    )


def test_overlong_ids_are_cut_to_a_key_safe_length_consistently_for_deps() -> None:
    long_id = "Step " + "x" * 300
    tasks = normalize_tasks(
        [RawTask(id=long_id, task="1"), RawTask(id=long_id, task="2", depends_on=[long_id])]
    )
    assert len(tasks[0].id) == MAX_BASE_ID_CHARS
    assert tasks[1].id == tasks[0].id + "_1"
    assert tasks[1].depends_on == [tasks[0].id]
