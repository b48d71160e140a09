"""What `teamctl status` and `teamctl tasks` cost at start: neither imports what only other verbs
use (the local worker pool, the budget, OpenTelemetry through redis-py), and `tasks` reads its
rows without a model per task, showing exactly what the TaskState models would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from teamctl.coordinator.cli.commands import (
    LISTING_FIELDS,
    ListedTask,
    listed_task,
    listing_row,
)
from teamctl.shared.clock import now_ms
from teamctl.shared.errors import UnreadableRecord
from teamctl.shared.task_records import TaskSpec

from tests.support.runs import planned_run

LOADED_PROBE = """
import json, sys
from click.testing import CliRunner
from teamctl.coordinator.cli import main
result = CliRunner().invoke(main, sys.argv[1:])
out = {"exit": result.exit_code, "output": result.stdout, "modules": sorted(sys.modules)}
print(json.dumps(out))
"""
"""A verb run in a fresh process, printing its exit, its output and every module it imported."""
NOT_FOR_READING = (
    "opentelemetry",
    "teamctl.coordinator.local_workers",
    "teamctl.shared.process.fork_server_client",
    "teamctl.coordinator.runs.run_control",
    "teamctl.coordinator.runs.approval",
    "teamctl.shared.budget",
    "teamctl.shared.bus",
)
"""Modules a read of a running board has no use for: OpenTelemetry (redis-py's metrics), the
local worker pool, run control and the plan's approval, the budget and the bus."""


def loaded_by(*args: str) -> dict[str, object]:
    """`teamctl ARGS` in a fresh process: its exit code, its output and the modules it loaded."""
    probe = subprocess.run(
        [sys.executable, "-c", LOADED_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out: dict[str, object] = json.loads(probe.stdout.strip().splitlines()[-1])
    return out


@pytest.mark.parametrize("verb", ["status", "tasks"])
def test_reading_a_run_imports_nothing_it_does_not_use(
    verb: str, conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    board = planned_run(conn, run_id, tmp_path, [TaskSpec(id="a", member_id="writer", task="A")])
    assert board.claim("a", "writer", "host:1", 60) is not None

    out = loaded_by(verb, run_id, "--redis-url", redis_url)

    assert out["exit"] == 0, out["output"]
    assert "in_progress" in str(out["output"])
    modules = out["modules"]
    assert isinstance(modules, list)
    assert [m for m in modules if m.startswith(NOT_FOR_READING)] == []
    assert "redis" in modules


def test_redis_py_is_imported_without_opentelemetry_which_stays_importable() -> None:
    """The connection module hides OpenTelemetry from redis-py's import alone: the package
    imports as usual afterwards (traces import it when tracing is on)."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "import teamctl.shared.redis.connection\n"
            "hidden = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
            "import opentelemetry.sdk.metrics\n"
            "print(hidden, 'opentelemetry.sdk.metrics' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip() == "[] True"


def test_listing_rows_read_from_hashes_equal_the_models_rows(
    conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """Every part of a row, every status, blank and absent fields, text a terminal would act on:
    the plain reading and the TaskState models show the same rows, awaiting approval or not."""
    ids = ["a", "b", "c", "d", "e", "f", "g"]
    board = planned_run(
        conn,
        run_id,
        tmp_path,
        [TaskSpec(id=t, member_id="writer", task=t.upper()) for t in ids]
        + [TaskSpec(id="h", member_id="writer", task="H", depends_on=["e"])],
    )
    for task_id in ("a", "b", "d", "e"):
        assert board.claim(task_id, "researcher", "host:1", 60) is not None
    far_ms = now_ms() + 3_600_000
    conn.hset(
        board.keys.task("a"),
        mapping={"replayed_steps": 3, "model": "backup/m", "fallback_from": "main/m"},
    )
    conn.hset(board.keys.task("b"), mapping={"waiting_model": "main/m", "waiting_until_ms": far_ms})
    conn.hset(board.keys.task("c"), mapping={"error": "it\nbroke \x1b[31mred\ttab"})
    conn.hset(board.keys.task("d"), mapping={"status": "completed", "model": "main/m"})
    conn.hset(board.keys.task("e"), mapping={"status": "failed", "error": "x" * 700})
    conn.hset(board.keys.task("f"), mapping={"fallback_from": "main/m", "model": ""})
    conn.hdel(board.keys.task("g"), "attempts", "claimed_by", "error", "status")
    conn.hset(board.keys.task("h"), mapping={"status": "blocked", "waiting_model": "main/m"})
    hashes = board.snapshot_hashes(LISTING_FIELDS)
    now = now_ms()

    listed = [listed_task(board, h) for h in hashes]

    assert [type(task) for task in listed] == [ListedTask] * len(hashes)  # no model built
    for awaiting in (False, True):
        rows = [listing_row(task, now, awaiting) for task in listed]
        assert rows == [listing_row(board.parse(h), now, awaiting) for h in hashes]
    assert [row[1] for row in rows] == [
        "in_progress",
        "in_progress",
        "planned",
        "completed",
        "failed",
        "planned",
        "planned",
        "blocked",
    ]


@pytest.mark.parametrize("attempts", ["-1", " 2", "3.0", "1_000", "\u0663"])
def test_a_count_the_plain_reading_does_not_take_is_read_as_the_model_reads_it(
    attempts: str, conn: redis.Redis, run_id: str, tmp_path: Path
) -> None:
    """No board script writes such a count; whatever TaskState makes of one (a number, or an
    unreadable record), the listing makes the same."""
    board = planned_run(conn, run_id, tmp_path, [TaskSpec(id="a", member_id="writer", task="A")])
    conn.hset(board.keys.task("a"), "attempts", attempts)
    (raw,) = board.snapshot_hashes(LISTING_FIELDS)
    try:
        expected: object = listing_row(board.parse(raw), 0, False)
    except UnreadableRecord as exc:
        expected = str(exc)

    try:
        shown: object = listing_row(listed_task(board, raw), 0, False)
    except UnreadableRecord as exc:
        shown = str(exc)

    assert shown == expected
