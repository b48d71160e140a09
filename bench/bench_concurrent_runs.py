"""Concurrent planned runs: `--runs` `teamctl run`s started at once on one Redis and `--workers`
preloaded workers, each a plan of `--tasks` independent zero-latency tasks, against one such run
alone on the same workers in the same run of the benchmark.

Figures: tasks/s of all the runs together (every task over first start to last end) against
one run alone, and the wall time of all against `--runs` times one run alone (what running them
one after the other would take); nothing lost: every run completed, every task completed once
(one claim, one model request each); the slowest script SLOWLOG recorded.

Run: .venv/bin/python -m bench.bench_concurrent_runs [--runs N] [--tasks T] [--workers K]
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.task_records import TaskState, TaskStatus

from bench import failed, slowlog
from bench.bench_startup import teamctl
from bench.bench_worker import worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

RUN_TIMEOUT_S = 1800.0
MEMBER = "member"


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    runs: int
    tasks: int
    workers: int
    alone_runs: int
    """Runs timed alone, one after the other (their median is the baseline)."""
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(runs=50, tasks=20, workers=8, alone_runs=3)
SMOKE = Sizes(runs=2, tasks=2, workers=1, alone_runs=1, fork_workers=True)


def write_team(path: Path, llm: ScriptedLLM, tasks: int, options: dict[str, int]) -> Path:
    """A one-member team file whose scripted planner plans `tasks` independent tasks (each
    answered "done" by the member model MEMBER), with these run `options`."""
    plan = {"tasks": [{"id": f"t{n}", "memberId": "m1", "task": f"task {n}"} for n in range(tasks)]}
    path.write_text(
        "\n".join(
            [
                f"planner = "
                f'{{ model = "{llm.script("plan", [json.dumps(plan)], repeat_last=True)}" }}',
                f'synthesizer = {{ model = "{llm.script("synth", ["final"], repeat_last=True)}" }}',
                f'model = "{llm.script(MEMBER, ["done"], repeat_last=True)}"',
                "[[members]]",
                'id = "m1"',
                "[options]",
                *(f"{name} = {value}" for name, value in options.items()),
            ]
        )
        + "\n"
    )
    return path


def run_all(
    llm: ScriptedLLM, url: str, team: Path, run_ids: list[str], tmp: Path
) -> tuple[float, float]:
    """Start every run at once; wall seconds until the last exits, and the CPU seconds of all
    the `teamctl run` processes. A failed run is an error."""
    started = time.perf_counter()
    procs = []
    for run_id in run_ids:
        log = (tmp / f"{run_id}.log").open("wb")
        procs.append(
            (
                run_id,
                log,
                subprocess.Popen(
                    [
                        *teamctl(),
                        "run",
                        "Many tasks",
                        "--team",
                        str(team),
                        "--api-base",
                        llm.api_base,
                        "--redis-url",
                        url,
                        "--workers",
                        "0",
                        "--run-id",
                        run_id,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                ),
            )
        )
    exits, cpu_s = [], 0.0
    for run_id, log, proc in procs:
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
        cpu_s += usage.ru_utime + usage.ru_stime
        if proc.returncode != 0:
            exits.append((run_id, proc.returncode))
        log.close()
    if exits:
        run_id, code = exits[0]
        raise failed(
            f"{len(exits)} of {len(run_ids)} runs failed, {run_id} first: it exited {code}",
            tmp / f"{run_id}.log",
        )
    return time.perf_counter() - started, cpu_s


def boards(conn: redis.Redis, run_ids: list[str]) -> list[TaskState]:
    return [s for run_id in run_ids for s in TaskBoard(conn, RunKeys(run_id)).snapshot()]


def tasks_per_s(states: list[TaskState]) -> float:
    span_s = (max(s.end_ms for s in states) - min(s.start_ms for s in states)) / 1000
    return len(states) / span_s


def run(sizes: Sizes) -> list[BenchFigure]:
    runs, tasks, workers = sizes.runs, sizes.tasks, sizes.workers
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-concurrent-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
            worker_fleet(url, workers, Path(tmp_dir), forked=sizes.fork_workers),
        ):
            tmp = Path(tmp_dir)
            conn = redis.Redis.from_url(url, decode_responses=True)
            team = write_team(
                tmp / "team.toml",
                llm,
                tasks,
                {"max_concurrency": 2 * workers, "max_rounds": 1000, "dependency_output_chars": 0},
            )
            # One run alone is short and noisy on a shared machine: the median of a few.
            alone_ids = [f"alone{n}" for n in range(sizes.alone_runs)]
            timed = sorted(run_all(llm, url, team, [run_id], tmp) for run_id in alone_ids)
            alone_s, alone_cpu_s = timed[len(timed) // 2]
            alone = boards(conn, [alone_ids[0]])
            slowlog.watch(conn)
            before = len(llm.requests[MEMBER])
            run_ids = [f"run{n}" for n in range(runs)]
            together_s, together_cpu_s = run_all(llm, url, team, run_ids, tmp)
            worst = slowlog.slowest(conn)
            together = boards(conn, run_ids)
            member_calls = len(llm.requests[MEMBER]) - before
    finally:
        llm.stop()
    expected = runs * tasks
    completed_once = sum(s.status is TaskStatus.COMPLETED and s.attempts == 1 for s in together)
    lost = expected - completed_once
    label = f"{runs} runs of {tasks} tasks, {workers} workers"
    return [
        BenchFigure(
            name=f"tasks/s, all runs at once ({label})",
            value=tasks_per_s(together),
            unit="tasks/s",
            baseline=tasks_per_s(alone),
            baseline_name="one run alone (the first)",
            note="first task start to last task end",
        ),
        BenchFigure(
            name="wall, all runs at once",
            value=together_s,
            unit="s",
            baseline=runs * alone_s,
            baseline_name=f"{runs} x one run alone (median of {sizes.alone_runs})",
            goal="ratio <= 1",
            met=together_s <= runs * alone_s,
            note="`teamctl run` start to the last exit",
        ),
        BenchFigure(
            name="CPU of the `teamctl run` processes, all runs",
            value=together_cpu_s,
            unit="s",
            baseline=runs * alone_cpu_s,
            baseline_name=f"{runs} x one run alone",
            note="coordinators only (workers and Redis aside)",
        ),
        BenchFigure(
            name="tasks not completed exactly once",
            value=lost,
            unit="tasks",
            goal="0",
            met=lost == 0 and len(together) == expected,
            note=f"{len(together)} tasks on the boards, {expected} planned",
        ),
        BenchFigure(
            name="member model requests",
            value=member_calls,
            unit="calls",
            baseline=expected,
            baseline_name="one per task",
            goal="= one per task",
            met=member_calls == expected,
        ),
        BenchFigure(
            name="slowest script, all runs at once (SLOWLOG)",
            value=worst.ms,
            unit="ms",
            goal="<= 5 ms",
            met=worst.ms <= slowlog.SLOW_US / 1000,
            note=worst.note(),
        ),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=FULL.runs)
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    args = parser.parse_args(argv)
    return print_figures(
        run(
            Sizes(
                runs=args.runs, tasks=args.tasks, workers=args.workers, alone_runs=FULL.alone_runs
            )
        )
    )


if __name__ == "__main__":
    sys.exit(main())
