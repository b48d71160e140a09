"""Throughput benchmark: 2,000 independent zero-latency tasks of one `teamctl run`
on 8 preloaded workers (FULL), and 300 on 4 (SMALL, the size the goal was first set at), each
against bare RQ no-op jobs on the same workers in the same run; and the coordinator's CPU
seconds per task.

Tasks/s is the tasks over first task start to last task end (from the board); no-op jobs/s is
as many jobs over enqueue of all to the last one finished. Goal: tasks/s >= 0.8 of no-op jobs/s.

Run: .venv/bin/python -m bench.bench_throughput
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from rq import Queue
from rq.job import JobStatus
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis

from bench import failed
from bench.bench_startup import teamctl
from bench.bench_worker import NOOP_JOB, QUEUE, wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

GOAL_RATIO = 0.8
RUN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    workers: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""

    @property
    def max_concurrency(self) -> int:
        """Twice the workers, so a worker finds the next job queued when it finishes one."""
        return 2 * self.workers


FULL = Sizes(tasks=2000, workers=8)
SMALL = Sizes(tasks=300, workers=4)
SMOKE = Sizes(tasks=20, workers=1, fork_workers=True)


def noop_jobs_per_s(url: str, tasks: int) -> float:
    """`tasks` no-op jobs enqueued at once: how many over the time until the last one
    finished."""
    queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
    started = time.perf_counter()
    jobs = queue.enqueue_many([Queue.prepare_data(NOOP_JOB, result_ttl=600) for _ in range(tasks)])
    last = jobs[-1]
    wait_for_flag(
        lambda: (
            queue.count == 0
            and last.get_status(refresh=True) == JobStatus.FINISHED
            and queue.started_job_registry.count == 0
        ),
        "the no-op jobs",
    )
    return tasks / (time.perf_counter() - started)


def run_tasks(llm: ScriptedLLM, url: str, tmp: Path, sizes: Sizes) -> tuple[float, float]:
    """(tasks/s, coordinator CPU seconds) of one run of `sizes.tasks` independent tasks."""
    plan = {
        "tasks": [
            {"id": f"t{n}", "memberId": "m1", "task": f"task {n}"} for n in range(sizes.tasks)
        ]
    }
    team = tmp / "team.toml"
    team.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script("plan", [json.dumps(plan)])}" }}',
                f'synthesizer = {{ model = "{llm.script("synth", ["final"])}" }}',
                f'model = "{llm.script("member", ["done"], repeat_last=True)}"',
                "[[members]]",
                'id = "m1"',
                "[options]",
                f"max_concurrency = {sizes.max_concurrency}",
                "max_rounds = 10000",
                "dependency_output_chars = 0",
            ]
        )
        + "\n"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (tmp / "run.log").open("wb") as log:
        done = subprocess.run(
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
                "throughput",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise failed(f"teamctl run exited {done.returncode}", tmp / "run.log")
    states = TaskBoard(
        redis.Redis.from_url(url, decode_responses=True), RunKeys("throughput")
    ).snapshot()
    if sum(s.status.value == "completed" for s in states) != sizes.tasks:
        raise RuntimeError("not every task completed")
    span_s = (max(s.end_ms for s in states) - min(s.start_ms for s in states)) / 1000
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return sizes.tasks / span_s, cpu_s


def collect(sizes: Sizes) -> dict[str, float]:
    """No-op jobs/s, tasks/s, and the coordinator's CPU seconds for the whole run."""
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory() as tmp_dir,
            throwaway_redis() as url,
            worker_fleet(url, sizes.workers, Path(tmp_dir), forked=sizes.fork_workers),
        ):
            tmp = Path(tmp_dir)
            noop = noop_jobs_per_s(url, sizes.tasks)
            tasks, cpu_s = run_tasks(llm, url, tmp, sizes)
    finally:
        llm.stop()
    return {"noop": noop, "tasks": tasks, "cpu": cpu_s}


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows at each size (the default ones, or the smoke pass's)."""
    return [row for sizes in ([SMOKE] if smoke else [FULL, SMALL]) for row in size_figures(sizes)]


def size_figures(sizes: Sizes) -> list[BenchFigure]:
    """Tasks/s against no-op jobs/s; coordinator CPU per task."""
    data = collect(sizes)
    ratio = data["tasks"] / data["noop"]
    return [
        BenchFigure(
            name=f"{sizes.tasks} independent tasks on {sizes.workers} workers",
            value=data["tasks"],
            unit="tasks/s",
            baseline=data["noop"],
            baseline_name=f"{sizes.tasks} bare RQ no-op jobs, same workers",
            goal=f"ratio >= {GOAL_RATIO}",
            met=ratio >= GOAL_RATIO,
            note=f"max_concurrency {sizes.max_concurrency}",
        ),
        BenchFigure(
            name=f"coordinator CPU per task, {sizes.tasks} tasks",
            value=data["cpu"] / sizes.tasks * 1000,
            unit="ms",
            note="whole `teamctl run` process, planning and synthesis included",
        ),
    ]


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
