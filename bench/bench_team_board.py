"""Team board benchmark: `team task add` as the board grows beside idle teammates that fit none
of its tasks, hand-outs from the full board, and the longest script Redis ran meanwhile
(SLOWLOG, threshold 5 ms).

Setup: a private redis-server, a persistent team of `--mates` idle teammates of role `dev`
(their records set idle directly: no worker, no model), then `--tasks` tasks of role `qa` added
one at a time through TeamTasks.add, so every add runs the hand-out beside every ready task and
every teammate. Then hand-outs from that board: `--handouts` times a qa teammate goes idle and
a wake-up hands it a task, and as often a qa teammate's turn completes its task and its turn
end takes the next one. Figures: the add's p50 and p99 in the first and the last tenth of the
adds, the hand-outs' p50 and p99, each against a no-op script call (EVALSHA of `return 1`)
measured in the same run, and the slowest script SLOWLOG recorded (goal: none over 5 ms).

Run: .venv/bin/python -m bench.bench_team_board [--tasks N] [--mates M] [--handouts H]
It starts its own redis-server and stops it by its pid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from bench.figures import BenchFigure, print_figures

SLOW_US = 5000
"""Redis's slowlog threshold for this benchmark: the rule is that no script blocks 5 ms."""
TEAM = "bench"
QUEUE = "nobody"
"""The teammates' queue, which no worker serves: their first turns wait there for ever."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    mates: int
    handouts: int


FULL = Sizes(tasks=10_000, mates=100, handouts=200)
SMOKE = Sizes(tasks=50, mates=3, handouts=5)


def idle_team(conn: redis.Redis, mates: int, room: int) -> TeamStore:
    """A team of `mates` idle teammates of role dev (spawned, then set idle as a turn end would
    leave them, so the hand-out considers every one), with room for `room` more."""
    store = TeamStore(conn, TEAM)
    store.create(TeamOptions(max_teammates=min(mates + room, 1000)))
    for index in range(mates):
        name = f"dev{index}"
        store.spawn(name, role="dev", prompt="Wait.", model="offline", api_base=None, queue=QUEUE)
        conn.hset(
            TeamKeys(TEAM).teammate(name),
            mapping={"status": TeammateStatus.IDLE.value, "job_id": "", "last_seen_ms": index},
        )
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


def wake_handouts(store: TeamStore, count: int) -> list[float]:
    """A qa teammate goes idle and a wake-up hands it the first ready task, `count` times (a
    fresh teammate each time, so the board only shrinks); each wake's seconds."""
    tasks = TeamTasks(store)
    times = []
    for index in range(count):
        name = f"qa{index}"
        store.spawn(name, role="qa", prompt="Check.", model="offline", api_base=None, queue=QUEUE)
        store.conn.hset(
            TeamKeys(TEAM).teammate(name),
            mapping={"status": TeammateStatus.IDLE.value, "job_id": "", "last_seen_ms": 0},
        )
        started = time.perf_counter()
        woken = tasks.wake()
        times.append(time.perf_counter() - started)
        assert woken == [name], woken
    return times


def turn_end_handouts(store: TeamStore, count: int) -> list[float]:
    """The first qa teammate's turn completes the task it holds and ends, `count` times: each
    end hands it the next ready task; each end's seconds."""
    tasks = TeamTasks(store)
    name = "qa0"
    times = []
    for _ in range(count):
        verdict, token = store.turns.begin_turn(name, "bench:1")
        assert verdict == "ok", verdict
        last_id, _ = store.messages.peek(name)
        store.turns.checkpoint(name, token, last_id, [])
        held = next(
            t for t in store.conn.smembers(TeamKeys(TEAM).running) if tasks.get(t).owner == name
        )
        tasks.complete(name, token, held, "checked")
        started = time.perf_counter()
        verdict = store.turns.end_turn(name, token, "done", f"{name} is idle")
        times.append(time.perf_counter() - started)
        assert verdict == "continue", verdict
        store.conn.delete(TeamKeys(TEAM).turn(name))  # the next begin takes a fresh lease
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
    return (
        statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
        if len(values) > 1
        else values[0]
    )


def run(tasks: int, mates: int, handouts: int) -> list[BenchFigure]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-team-board-") as tmp,
        throwaway_redis(Path(tmp)) as url,
    ):
        conn = redis.Redis.from_url(url, decode_responses=True)
        conn.config_set("slowlog-log-slower-than", SLOW_US)
        store = idle_team(conn, mates, handouts)
        base = noop_script_s(conn)
        conn.slowlog_reset()
        adds = add_tasks(store, tasks)
        woken = wake_handouts(store, handouts)
        ends = turn_end_handouts(store, handouts)
        worst_ms, worst_name = slowest_script_ms(conn)
        slow = len(conn.slowlog_get(1024))
    tenth = max(1, tasks // 10)
    base_p50_ms = statistics.median(base) * 1000
    first, last = adds[:tenth], adds[-tenth:]
    label = f"{tasks} qa tasks beside {mates} idle dev teammates"

    def figure(name: str, seconds: list[float], q: float) -> BenchFigure:
        return BenchFigure(
            name=name,
            value=p(seconds, q) * 1000,
            unit="ms",
            baseline=base_p50_ms,
            baseline_name="no-op script p50",
        )

    return [
        figure(f"task add p50, first {tenth} ({label})", first, 50),
        figure(f"task add p99, first {tenth}", first, 99),
        figure(f"task add p50, last {tenth}", last, 50),
        figure(f"task add p99, last {tenth}", last, 99),
        figure(f"hand-out by wake-up p50 ({handouts}, one idle qa teammate each)", woken, 50),
        figure("hand-out by wake-up p99", woken, 99),
        figure(f"hand-out at a turn end p50 ({handouts}, complete then end)", ends, 50),
        figure("hand-out at a turn end p99", ends, 99),
        BenchFigure(
            name="slowest script (SLOWLOG)",
            value=worst_ms,
            unit="ms",
            goal="<= 5 ms",
            met=worst_ms <= SLOW_US / 1000,
            note=f"{worst_name}; {slow} commands over 5 ms",
        ),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    sizes = SMOKE if smoke else FULL
    return run(sizes.tasks, sizes.mates, sizes.handouts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    parser.add_argument("--mates", type=int, default=FULL.mates)
    parser.add_argument("--handouts", type=int, default=FULL.handouts)
    args = parser.parse_args(argv)
    return print_figures(run(args.tasks, args.mates, args.handouts))


if __name__ == "__main__":
    sys.exit(main())
