"""Redis memory benchmark: bytes of `used_memory` (INFO memory) per planned task, per bus
message and per idle teammate, each over `--count` of them on a private redis-server, against
the empty server measured in the same run; beside each, the text it carries (what a byte-exact
store would need).

Tasks are created as plans of 500 (a run's board: task hash, order list, ready index, counts,
events); messages are peer messages of 100 characters on a run's bus (stream entry, inbox
index, sequence); teammates are spawned into one team and set idle as a turn end leaves them
(the RQ job of their first turn is deleted: an idle teammate has none queued).

Then what a workspace kept in Redis holds when a member floods it with empty files of long
names (the case path names, not contents, once made unbounded): saved through WorkspaceFiles
into workspaces capped at each of WORKSPACE_CAPS_BYTES (the smaller cap takes none of them, the
larger a few), against the cap, then after deleting them all.

Run: .venv/bin/python -m bench.bench_memory [--count N]
It starts its own redis-server and stops it by its pid.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.roster import write_roster
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.workspace.caps import FileCaps
from teamctl.shared.workspace.redis_files import SaveVerdict, WorkspaceFiles

from bench.bench_team_board import idle_team
from bench.figures import BenchFigure, print_figures

COUNT = 5000
SMOKE_COUNT = 50
"""The smoke pass's count: enough to show the benchmark runs, not to measure it."""
PLAN_TASKS = 500
MAX_TEAMMATES = 1000
"""A team's max_teammates: the teammates' figure stops there."""
TASK_TEXT = "Check the module's error handling and say what is missing. " * 2
WORKSPACE_CAPS_BYTES = (4096, 65_536)
WORKSPACE_FILES = 3000
WORKSPACE_PATH_BYTES = 3000
WORKSPACE_SLACK_BYTES = 2048
"""Redis's own cost of a workspace's four structures (files, versions, deletions, info), which the
cap does not count (tests/tools/test_workspace_caps.py allows the same)."""
MESSAGE_TEXT = (
    "Status: the parser is done, tests pass; next I take the exporter. Ping me if blocked."
)[:100].ljust(100, ".")


def used_bytes(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def add_tasks(conn: redis.Redis, count: int) -> None:
    """`count` tasks as plans of PLAN_TASKS, each plan a run's board."""
    for plan in range(0, count, PLAN_TASKS):
        size = min(PLAN_TASKS, count - plan)
        TaskBoard(conn, RunKeys(f"mem-{plan}")).create(
            [TaskSpec(id=f"t{i}", member_id="m1", task=TASK_TEXT) for i in range(size)]
        )


def add_messages(conn: redis.Redis, count: int) -> None:
    """`count` peer messages between two members of one run."""
    keys = RunKeys("mem-bus")
    write_roster(conn, keys, ["alice", "bob"])
    bus = MessageBus(conn, keys)
    for n in range(count):
        bus.send("alice" if n % 2 else "bob", "bob" if n % 2 else "alice", None, None, MESSAGE_TEXT)


def add_teammates(conn: redis.Redis, count: int) -> None:
    """`count` idle teammates of one team, with no turn queued."""
    idle_team(conn, count, room=0)  # the caller keeps count within a team's max_teammates
    doomed = list(conn.scan_iter("rq:*", count=1000))
    for at in range(0, len(doomed), 500):
        conn.delete(*doomed[at : at + 500])


def per_item(conn: redis.Redis, add: Callable[[redis.Redis, int], None], count: int) -> float:
    """Bytes of used_memory per item added, from an empty database."""
    conn.flushall()
    before = used_bytes(conn)
    add(conn, count)
    return (used_bytes(conn) - before) / count


def workspace_held(conn: redis.Redis) -> int:
    """What Redis holds for the flooded workspace: MEMORY USAGE of each of its keys."""
    keys = RunKeys("mem-workspace")
    names = [
        keys.files,
        keys.file_versions,
        keys.file_deletions,
        keys.files_info,
        *conn.scan_iter(match=f"{keys.base}:blob:*", count=1000),
    ]
    return sum(
        int(conn.execute_command("MEMORY", "USAGE", name, "SAMPLES", "0") or 0) for name in names
    )


def flood_workspace(conn: redis.Redis, files: int, cap_bytes: int) -> tuple[int, int, int]:
    """Empty files with WORKSPACE_PATH_BYTES-long paths saved into a workspace capped at
    `cap_bytes`, then each saved one deleted: (saved, bytes held after the saves, bytes held
    after the deletes)."""
    conn.flushall()
    store = WorkspaceFiles(conn, RunKeys("mem-workspace"), FileCaps(workspace_max_bytes=cap_bytes))
    saved: dict[str, int] = {}
    for n in range(files):
        path = f"{n:05d}/" + "p" * (WORKSPACE_PATH_BYTES - 6)
        outcome = store.save(path, 0, b"")
        if outcome.verdict is SaveVerdict.SAVED:
            saved[path] = outcome.version
    after_saves = workspace_held(conn)
    for path, version in saved.items():
        store.save(path, version, None)
    store.close()
    return len(saved), after_saves, workspace_held(conn)


def workspace_figures(conn: redis.Redis, files: int, cap_bytes: int) -> list[BenchFigure]:
    saved, held, left = flood_workspace(conn, files, cap_bytes)
    bound = cap_bytes + WORKSPACE_SLACK_BYTES
    goal = f"<= cap + {WORKSPACE_SLACK_BYTES:,} B"
    note = (
        f"{files} empty files with {WORKSPACE_PATH_BYTES}-byte paths offered, {saved} "
        "saved; MEMORY USAGE of the workspace's keys"
    )
    return [
        BenchFigure(
            name=f"Redis memory of a flooded workspace capped at {cap_bytes:,} B",
            value=held,
            unit="B",
            baseline=cap_bytes,
            baseline_name="workspace_max_bytes",
            goal=goal,
            met=held <= bound,
            note=note,
        ),
        BenchFigure(
            name=f"... capped at {cap_bytes:,} B, after deleting every file saved",
            value=left,
            unit="B",
            baseline=cap_bytes,
            baseline_name="workspace_max_bytes",
            goal=goal,
            met=left <= bound,
            note="deleted paths' records count until they are dropped",
        ),
    ]


def run(count: int, workspace_files: int) -> list[BenchFigure]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp,
        throwaway_redis(Path(tmp)) as url,
    ):
        conn = redis.Redis.from_url(url, decode_responses=True)
        empty = used_bytes(conn)
        task = per_item(conn, add_tasks, count)
        message = per_item(conn, add_messages, count)
        mates = min(count, MAX_TEAMMATES)
        mate = per_item(conn, add_teammates, mates)
        workspace = [
            row
            for cap in WORKSPACE_CAPS_BYTES
            for row in workspace_figures(conn, workspace_files, cap)
        ]
    note = f"{count} of them; empty server {empty / 1024 / 1024:.2f} MiB"
    return [
        BenchFigure(
            name="Redis memory per planned task",
            value=task,
            unit="B",
            baseline=len(TASK_TEXT),
            baseline_name="its task text",
            note=note,
        ),
        BenchFigure(
            name="Redis memory per bus message",
            value=message,
            unit="B",
            baseline=len(MESSAGE_TEXT),
            baseline_name="its text",
            note=note,
        ),
        BenchFigure(
            name="Redis memory per idle teammate",
            value=mate,
            unit="B",
            note=f"{mates} of them in one team; first turn's prompt 5 characters",
        ),
        *workspace,
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default size, or the smoke pass's."""
    return run(SMOKE_COUNT, SMOKE_COUNT) if smoke else run(COUNT, WORKSPACE_FILES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--workspace-files", type=int, default=WORKSPACE_FILES)
    args = parser.parse_args(argv)
    return print_figures(run(args.count, args.workspace_files))


if __name__ == "__main__":
    sys.exit(main())
