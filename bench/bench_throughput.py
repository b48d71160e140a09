"""Throughput benchmark: TASKS independent zero-latency tasks of one `teamctl run`
on WORKERS preloaded workers, against bare RQ no-op jobs on the same workers in the same run;
and the coordinator's CPU seconds per task.

Tasks/s is TASKS over first task start to last task end (from the board); no-op jobs/s is
TASKS over enqueue of all to the last one finished. Goal: tasks/s >= 0.6 of no-op jobs/s.

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
from pathlib import Path

import redis
from rq import Queue
from rq.job import JobStatus
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis

from bench.bench_startup import teamctl
from bench.bench_worker import NOOP_JOB, QUEUE, wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

TASKS = 2000
WORKERS = 8
MAX_CONCURRENCY = 2 * WORKERS
"""Twice the workers, so a worker finds the next job queued when it finishes one."""
GOAL_RATIO = 0.6
RUN_TIMEOUT_S = 600.0


def noop_jobs_per_s(url: str) -> float:
    """TASKS no-op jobs enqueued at once: TASKS over the time until the last one finished."""
    queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
    started = time.perf_counter()
    jobs = queue.enqueue_many([Queue.prepare_data(NOOP_JOB, result_ttl=600)
                               for _ in range(TASKS)])
    last = jobs[-1]
    wait_for_flag(lambda: queue.count == 0 and last.get_status(refresh=True) == JobStatus.FINISHED
          and queue.started_job_registry.count == 0, "the no-op jobs")
    return TASKS / (time.perf_counter() - started)


def run_tasks(llm: ScriptedLLM, url: str, tmp: Path) -> tuple[float, float]:
    """(tasks/s, coordinator CPU seconds) of one run of TASKS independent tasks."""
    plan = {"tasks": [{"id": f"t{n}", "memberId": "m1", "task": f"task {n}"}
                      for n in range(TASKS)]}
    team = tmp / "team.toml"
    team.write_text("\n".join([
        f'planner = {{ model = "{llm.script("plan", [json.dumps(plan)])}" }}',
        f'synthesizer = {{ model = "{llm.script("synth", ["final"])}" }}',
        f'model = "{llm.script("member", ["done"], repeat_last=True)}"',
        "[[members]]", 'id = "m1"',
        "[options]", f"max_concurrency = {MAX_CONCURRENCY}", "max_rounds = 10000",
        "dependency_output_chars = 0"]) + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with (tmp / "run.log").open("wb") as log:
        done = subprocess.run([*teamctl(), "run", "Many tasks", "--team", str(team),
                               "--api-base", llm.api_base, "--redis-url", url, "--workers", "0",
                               "--run-id", "throughput"],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              timeout=RUN_TIMEOUT_S, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"teamctl run exited {done.returncode}: see {tmp}/run.log")
    states = TaskBoard(redis.Redis.from_url(url, decode_responses=True),
                       RunKeys("throughput")).snapshot()
    if sum(s.status.value == "completed" for s in states) != TASKS:
        raise RuntimeError("not every task completed")
    span_s = (max(s.end_ms for s in states) - min(s.start_ms for s in states)) / 1000
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return TASKS / span_s, cpu_s


def collect() -> dict[str, float]:
    """No-op jobs/s, tasks/s, and the coordinator's CPU seconds for the whole run."""
    llm = ScriptedLLM()
    llm.start()
    try:
        with tempfile.TemporaryDirectory() as tmp_dir, throwaway_redis() as url, \
                worker_fleet(url, WORKERS, Path(tmp_dir)):
            tmp = Path(tmp_dir)
            noop = noop_jobs_per_s(url)
            tasks, cpu_s = run_tasks(llm, url, tmp)
    finally:
        llm.stop()
    return {"noop": noop, "tasks": tasks, "cpu": cpu_s}


def figures() -> list[BenchFigure]:
    """The report's rows: tasks/s against no-op jobs/s; coordinator CPU per task."""
    data = collect()
    ratio = data["tasks"] / data["noop"]
    return [BenchFigure(name=f"{TASKS} independent tasks on {WORKERS} workers", value=data["tasks"],
                        unit="tasks/s", baseline=data["noop"],
                        baseline_name=f"{TASKS} bare RQ no-op jobs, same workers",
                        goal=f"ratio >= {GOAL_RATIO}", met=ratio >= GOAL_RATIO,
                        note=f"max_concurrency {MAX_CONCURRENCY}"),
            BenchFigure(name="coordinator CPU per task", value=data["cpu"] / TASKS * 1000,
                        unit="ms", note="whole `teamctl run` process, planning and synthesis "
                        "included")]


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
