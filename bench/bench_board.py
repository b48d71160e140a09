"""Board benchmark: the per-task claim cycle against one bare EVALSHA, and create + full drain at
200 vs 2,000 tasks (a linear board costs ~10x, a board that rescans per operation ~100x).

Run: .venv/bin/python -m bench.bench_board [--repeats N]
Starts its own redis-server (appendonly off) on a free port and stops it by pid.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import Scripts
from teamctl.shared.task_records import TaskSpec

from bench import private_redis
from bench.figures import BenchFigure

BATCH = 50
TTL_S = 30.0


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    cycle_tasks: int
    evalsha_calls: int
    drain_sizes: tuple[int, int]
    repeats: int


FULL = Sizes(cycle_tasks=2000, evalsha_calls=5000, drain_sizes=(200, 2000), repeats=5)
SMOKE = Sizes(cycle_tasks=20, evalsha_calls=50, drain_sizes=(10, 100), repeats=1)


def layered_plan(size: int) -> list[TaskSpec]:
    """Task i depends on i-1 and i//2: every completion wakes dependents through the index."""
    return [
        TaskSpec(
            id=f"t{i}",
            member_id="m1",
            task="x",
            depends_on=sorted({f"t{i - 1}", f"t{i // 2}"}) if i else [],
        )
        for i in range(size)
    ]


def bare_evalsha_us(conn: redis.Redis, calls: int) -> float:
    """Microseconds for one EVALSHA round trip of `return 1`, over `calls` calls."""
    script = conn.register_script("return 1")
    script()
    started = time.perf_counter()
    for _ in range(calls):
        script()
    return (time.perf_counter() - started) / calls * 1e6


def cycle_us(conn: redis.Redis, scripts: Scripts, tasks: int) -> float:
    """Microseconds per task for claim + heartbeat + complete on `tasks` independent ready
    tasks."""
    board = TaskBoard(conn, RunKeys(f"b-{uuid.uuid4().hex[:8]}"), scripts)
    board.create([TaskSpec(id=f"t{i}", member_id="m1", task="x") for i in range(tasks)])
    started = time.perf_counter()
    for i in range(tasks):
        task_id = f"t{i}"
        token = board.claim(task_id, "m1", "bench:1", TTL_S)
        assert token is not None
        board.heartbeat(task_id, token, TTL_S)
        board.complete(task_id, token, "ok", 1)
    return (time.perf_counter() - started) / tasks * 1e6


def create_and_drain_ms(conn: redis.Redis, scripts: Scripts, size: int) -> float:
    """Milliseconds to create a layered plan and drain it through next_ready/claim/complete."""
    board = TaskBoard(conn, RunKeys(f"d-{uuid.uuid4().hex[:8]}"), scripts)
    started = time.perf_counter()
    board.create(layered_plan(size))
    done = 0
    while board.has_work_remaining():
        for task_id in board.next_ready(BATCH):
            token = board.claim(task_id, "m1", "bench:1", TTL_S)
            assert token is not None
            board.complete(task_id, token, "ok", 1)
            done += 1
    elapsed = time.perf_counter() - started
    assert done == size, f"drained {done} of {size}"
    return elapsed * 1000


def server_cpu_us(conn: redis.Redis) -> float:
    """CPU time the redis-server process has used: unlike wall time, other load does not count."""
    cpu = conn.info("cpu")
    return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6


def measured(conn: redis.Redis, measure: Callable[[], float]) -> tuple[float, float]:
    """(wall figure, server CPU microseconds) for one run of `measure`."""
    before = server_cpu_us(conn)
    wall = measure()
    return wall, server_cpu_us(conn) - before


def medians(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def collect(sizes: Sizes) -> dict[str, tuple[float, float]]:
    """Median (wall, server CPU) of each figure over `sizes.repeats` interleaved runs."""
    with private_redis() as conn:
        scripts = Scripts(conn)
        runs: dict[str, list[tuple[float, float]]] = {}
        # Interleaved repeats: load from other processes on a small machine hits every figure.
        for _ in range(sizes.repeats):
            runs.setdefault("evalsha", []).append(
                measured(conn, lambda: bare_evalsha_us(conn, sizes.evalsha_calls))
            )
            runs.setdefault("cycle", []).append(
                measured(conn, lambda: cycle_us(conn, scripts, sizes.cycle_tasks))
            )
            for n in sizes.drain_sizes:
                runs.setdefault(f"drain{n}", []).append(
                    measured(conn, partial(create_and_drain_ms, conn, scripts, n))
                )
    return {name: medians(values) for name, values in runs.items()}


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: the claim cycle against bare EVALSHA, drain cost against linear."""
    sizes = SMOKE if smoke else FULL
    data = collect(sizes)
    evalsha, cycle = data["evalsha"][0], data["cycle"][0]
    small, large = sizes.drain_sizes
    wall_ratio = data[f"drain{large}"][0] / data[f"drain{small}"][0]
    server_ratio = data[f"drain{large}"][1] / data[f"drain{small}"][1]
    rows = [
        BenchFigure(
            name="claim + heartbeat + complete per task",
            value=cycle,
            unit="us",
            baseline=evalsha,
            baseline_name="bare EVALSHA round trip",
            note="3 round trips",
        )
    ]
    rows += [
        BenchFigure(
            name=f"create + drain {n} tasks",
            value=data[f"drain{n}"][0],
            unit="ms",
            note=f"{data[f'drain{n}'][0] / n * 1000:.0f} us/task",
        )
        for n in sizes.drain_sizes
    ]
    linear = large / small
    rows.append(
        BenchFigure(
            name=f"drain {large}/{small}, wall",
            value=wall_ratio,
            unit="x",
            baseline=linear,
            baseline_name="linear",
            goal=f"<= {2 * linear:.0f}x (a rescan per operation ~100x)",
            met=wall_ratio <= 2 * linear,
        )
    )
    rows.append(
        BenchFigure(
            name=f"drain {large}/{small}, redis-server CPU",
            value=server_ratio,
            unit="x",
            baseline=linear,
            baseline_name="linear",
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=FULL.repeats, help="runs per figure (median shown)"
    )
    args = parser.parse_args()
    sizes = replace(FULL, repeats=args.repeats)
    report(collect(sizes), sizes)


def report(figures: dict[str, tuple[float, float]], sizes: Sizes) -> None:
    """Print the figures; "server" is redis-server CPU time, per call, per task or per drain."""
    evalsha, evalsha_server = figures["evalsha"]
    cycle, cycle_server = figures["cycle"]
    print(
        f"bare EVALSHA round trip:          {evalsha:8.1f} us   "
        f"(server {evalsha_server / sizes.evalsha_calls:5.1f} us)"
    )
    print(
        f"claim+heartbeat+complete / task:  {cycle:8.1f} us   "
        f"(server {cycle_server / sizes.cycle_tasks:5.1f} us) = {cycle / evalsha:.2f} x EVALSHA, "
        "3 round trips"
    )
    for n in sizes.drain_sizes:
        wall_ms, server = figures[f"drain{n}"]
        print(
            f"create + drain {n:>5} tasks:       {wall_ms:8.1f} ms   "
            f"(server {server / 1000:6.1f} ms; {wall_ms / n * 1000:.0f} us/task)"
        )
    small, large = sizes.drain_sizes
    wall_ratio = figures[f"drain{large}"][0] / figures[f"drain{small}"][0]
    server_ratio = figures[f"drain{large}"][1] / figures[f"drain{small}"][1]
    print(
        f"drain ratio {large}/{small}:  wall {wall_ratio:.2f} x, server {server_ratio:.2f} x  "
        f"(linear = {large / small:.0f} x; a rescan per operation would be ~100 x)"
    )


if __name__ == "__main__":
    main()
