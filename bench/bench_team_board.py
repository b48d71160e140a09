"""Team board benchmark: `team task add` as the board grows beside idle teammates that fit none
of its tasks, and the longest script Redis ran meanwhile (SLOWLOG, threshold 5 ms).

Setup: a private redis-server, a persistent team of `--mates` idle teammates of role `dev`
(their records set idle directly: no worker, no model), then `--tasks` tasks of role `qa` added
one at a time through TeamTasks.add, so every add runs the hand-out over every ready task and
every teammate. Figures: the add's p50 and p99 in the first and the last tenth of the adds, each
against a no-op script call (EVALSHA of `return 1`) measured in the same run, and the slowest
script SLOWLOG recorded (goal: none over 5 ms).

Run: .venv/bin/python -m bench.bench_team_board [--tasks N] [--mates M]
It starts its own redis-server and stops it by its pid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis
from teamctl.shared.embedded_redis import throwaway_redis
from teamctl.shared.keys import TeamKeys
from teamctl.shared.team_tasks import TeamTasks
from teamctl.shared.teammates import MateStatus, TeamOptions
from teamctl.shared.teams import TeamStore

from bench.figures import BenchFigure, print_figures

SLOW_US = 5000
"""Redis's slowlog threshold for this benchmark: the rule is that no script blocks 5 ms."""
TEAM = "bench"
QUEUE = "nobody"
"""The teammates' queue, which no worker serves: their first turns wait there for ever."""


def idle_team(conn: redis.Redis, mates: int) -> TeamStore:
    """A team of `mates` idle teammates of role dev (spawned, then set idle as a turn end would
    leave them, so the hand-out considers every one)."""
    store = TeamStore(conn, TEAM)
    store.create(TeamOptions(max_teammates=max(mates, 1)))
    for index in range(mates):
        name = f"dev{index}"
        store.spawn(name, role="dev", prompt="Wait.", model="offline", api_base=None,
                    queue=QUEUE)
        conn.hset(TeamKeys(TEAM).mate(name), mapping={
            "status": MateStatus.IDLE.value, "job_id": "", "last_seen_ms": index})
    return store


def noop_script_s(conn: redis.Redis, calls: int = 200) -> list[float]:
    """The round trip of a script that does nothing: the floor every script call pays."""
    noop = conn.register_script("return 1")
    noop()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        noop()
        times.append(time.perf_counter() - started)
    return times


def add_tasks(store: TeamStore, count: int) -> list[float]:
    """Add `count` qa tasks one at a time; each add's seconds."""
    tasks = TeamTasks(store)
    times = []
    for index in range(count):
        started = time.perf_counter()
        tasks.add(f"check {index}", role="qa")
        times.append(time.perf_counter() - started)
    return times


def slowest_script_ms(conn: redis.Redis) -> tuple[float, str]:
    """The longest command SLOWLOG kept, in ms, and its name."""
    entries = conn.slowlog_get(1024)
    if not entries:
        return 0.0, "-"
    worst = max(entries, key=lambda e: e["duration"])
    command = worst["command"]
    name = command.decode() if isinstance(command, bytes) else str(command)
    return worst["duration"] / 1000, name.split(" ")[0]


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] \
        if len(values) > 1 else values[0]


def run(tasks: int, mates: int) -> list[BenchFigure]:
    with tempfile.TemporaryDirectory(prefix="bench-team-board-") as tmp, \
            throwaway_redis(Path(tmp)) as url:
        conn = redis.Redis.from_url(url, decode_responses=True)
        conn.config_set("slowlog-log-slower-than", SLOW_US)
        store = idle_team(conn, mates)
        base = noop_script_s(conn)
        conn.slowlog_reset()
        adds = add_tasks(store, tasks)
        worst_ms, worst_name = slowest_script_ms(conn)
        slow = len(conn.slowlog_get(1024))
    tenth = max(1, tasks // 10)
    base_p50_ms = statistics.median(base) * 1000
    first, last = adds[:tenth], adds[-tenth:]
    label = f"{tasks} qa tasks beside {mates} idle dev teammates"
    return [
        BenchFigure(name=f"task add p50, first {tenth} ({label})", value=p(first, 50) * 1000,
                    unit="ms", baseline=base_p50_ms, baseline_name="no-op script p50"),
        BenchFigure(name=f"task add p99, first {tenth}", value=p(first, 99) * 1000, unit="ms",
                    baseline=base_p50_ms, baseline_name="no-op script p50"),
        BenchFigure(name=f"task add p50, last {tenth}", value=p(last, 50) * 1000, unit="ms",
                    baseline=base_p50_ms, baseline_name="no-op script p50"),
        BenchFigure(name=f"task add p99, last {tenth}", value=p(last, 99) * 1000, unit="ms",
                    baseline=base_p50_ms, baseline_name="no-op script p50"),
        BenchFigure(name="slowest script (SLOWLOG)", value=worst_ms, unit="ms",
                    goal="<= 5 ms", met=worst_ms <= SLOW_US / 1000,
                    note=f"{worst_name}; {slow} commands over 5 ms"),
    ]


def figures() -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes."""
    return run(2000, 8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--mates", type=int, default=8)
    args = parser.parse_args(argv)
    return print_figures(run(args.tasks, args.mates))


if __name__ == "__main__":
    sys.exit(main())
