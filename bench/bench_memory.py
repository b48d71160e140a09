"""Redis memory benchmark: bytes of `used_memory` (INFO memory) per planned task, per bus
message and per idle teammate, each over `--count` of them on a private redis-server, against
the empty server measured in the same run; beside each, the text it carries (what a byte-exact
store would need).

Tasks are created as plans of 500 (a run's board: task hash, order list, ready index, counts,
events); messages are peer messages of 100 characters on a run's bus (stream entry, inbox
index, sequence); teammates are spawned into one team and set idle as a turn end leaves them
(the RQ job of their first turn is deleted: an idle teammate has none queued).

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

from bench.bench_team_board import idle_team
from bench.figures import BenchFigure, print_figures

COUNT = 5000
SMOKE_COUNT = 50
"""The smoke pass's count: enough to show the benchmark runs, not to measure it."""
PLAN_TASKS = 500
MAX_TEAMMATES = 1000
"""A team's max_teammates: the teammates' figure stops there."""
TASK_TEXT = "Check the module's error handling and say what is missing. " * 2
MESSAGE_TEXT = ("Status: the parser is done, tests pass; next I take the exporter. "
                "Ping me if blocked.")[:100].ljust(100, ".")


def used_bytes(conn: redis.Redis) -> int:
    return int(conn.info("memory")["used_memory"])


def add_tasks(conn: redis.Redis, count: int) -> None:
    """`count` tasks as plans of PLAN_TASKS, each plan a run's board."""
    for plan in range(0, count, PLAN_TASKS):
        size = min(PLAN_TASKS, count - plan)
        TaskBoard(conn, RunKeys(f"mem-{plan}")).create(
            [TaskSpec(id=f"t{i}", member_id="m1", task=TASK_TEXT) for i in range(size)])


def add_messages(conn: redis.Redis, count: int) -> None:
    """`count` peer messages between two members of one run."""
    keys = RunKeys("mem-bus")
    write_roster(conn, keys, ["alice", "bob"])
    bus = MessageBus(conn, keys)
    for n in range(count):
        bus.send("alice" if n % 2 else "bob", "bob" if n % 2 else "alice", None, None,
                 MESSAGE_TEXT)


def add_teammates(conn: redis.Redis, count: int) -> None:
    """`count` idle teammates of one team, with no turn queued."""
    idle_team(conn, count, room=0)  # the caller keeps count within a team's max_teammates
    doomed = list(conn.scan_iter("rq:*", count=1000))
    for at in range(0, len(doomed), 500):
        conn.delete(*doomed[at:at + 500])


def per_item(conn: redis.Redis, add: Callable[[redis.Redis, int], None], count: int) -> float:
    """Bytes of used_memory per item added, from an empty database."""
    conn.flushall()
    before = used_bytes(conn)
    add(conn, count)
    return (used_bytes(conn) - before) / count


def run(count: int) -> list[BenchFigure]:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp, \
            throwaway_redis(Path(tmp)) as url:
        conn = redis.Redis.from_url(url, decode_responses=True)
        empty = used_bytes(conn)
        task = per_item(conn, add_tasks, count)
        message = per_item(conn, add_messages, count)
        mates = min(count, MAX_TEAMMATES)
        mate = per_item(conn, add_teammates, mates)
    note = f"{count} of them; empty server {empty / 1024 / 1024:.2f} MiB"
    return [
        BenchFigure(name="Redis memory per planned task", value=task, unit="B",
                    baseline=len(TASK_TEXT), baseline_name="its task text", note=note),
        BenchFigure(name="Redis memory per bus message", value=message, unit="B",
                    baseline=len(MESSAGE_TEXT), baseline_name="its text", note=note),
        BenchFigure(name="Redis memory per idle teammate", value=mate, unit="B",
                    note=f"{mates} of them in one team; first turn's prompt 5 characters"),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default size, or the smoke pass's."""
    return run(SMOKE_COUNT if smoke else COUNT)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=COUNT)
    args = parser.parse_args(argv)
    return print_figures(run(args.count))


if __name__ == "__main__":
    sys.exit(main())
