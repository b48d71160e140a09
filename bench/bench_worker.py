"""Worker benchmark: per-task overhead of `teamctl.worker.jobs.run_task` (claim, dispatch input,
one call to a zero-latency scripted model through litellm, fenced complete, result message) against
a bare RQ no-op job on the same worker, measured in the same run; then both again on a bare
`rq worker members` (no preload) to show what `-c teamctl.worker.settings` saves, and on a preloaded
SimpleWorker (no fork per job).

Run: .venv/bin/python -m bench.bench_worker
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from rq import Queue
from rq.job import Job, JobStatus
from teamctl.coordinator.cli.local_workers import stop_process, worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.embedded_redis import throwaway_redis
from teamctl.shared.keys import RunKeys
from teamctl.shared.models import TaskSpec
from teamctl.shared.runstore import RunStore, now_ms
from teamctl.shared.team import Member, ModelChoice, RunOptions, RunSpec

from tests.scripted_llm import ScriptedLLM

QUEUE = "members"
PRELOADED_TASKS = 60
BARE_TASKS = 3
ROUNDS = {"preloaded": 5, "warm-fork": 5, "bare": 1, "simple": 5}
WARM_FORK = "teamctl.worker.warm_fork.WarmForkWorker"
RATIO_GOAL = 1.5
WAIT_TIMEOUT_S = 300.0
NOOP_JOB = "os.getpid"
"""The baseline job: already imported in every worker, so it measures RQ's own per-job cost."""


@contextmanager
def worker(command: list[str], log_path: Path, url: str) -> Iterator[None]:
    """One rq worker process, stopped by its pid (SIGTERM: RQ's warm shutdown)."""
    env = dict(os.environ)  # teamctl.worker.settings sets litellm's offline cost map itself
    conn = redis.Redis.from_url(url)
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
    try:
        _wait(lambda: conn.scard("rq:workers") >= 1, "the worker to register")
        yield
    finally:
        stop_process(process, timeout_s=30)
        conn.delete("rq:workers", f"rq:workers:{QUEUE}")


def _wait(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)  # polling a finished flag; nothing to block on


def make_run(conn: redis.Redis, run_id: str, model: str, api_base: str, tasks: int,
             workspace: Path) -> None:
    spec = RunSpec(run_id=run_id, team_id="bench", objective="benchmark the worker",
                   members=[Member(id="m1", model=model)], options=RunOptions(),
                   models=ModelChoice(planner=model, synthesizer=model, member_default=model,
                                      api_base=api_base),
                   workspace_dir=str(workspace), created_ms=now_ms())
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(
        [TaskSpec(id=f"t{n}", member_id="m1", task=f"task {n}") for n in range(tasks)])


def per_task_ms(queue: Queue, jobs: list[tuple[str, tuple[str, ...]]]) -> float:
    """Enqueue the jobs at once and time until the last one (FIFO, one worker) finished."""
    started = time.perf_counter()
    enqueued = [queue.enqueue(fn, *args, job_timeout=600, result_ttl=600) for fn, args in jobs]
    last = enqueued[-1]
    _wait(lambda: last.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED),
          "the last job")
    elapsed_ms = (time.perf_counter() - started) * 1000
    statuses = {Job.fetch(j.id, connection=queue.connection).get_status() for j in enqueued}
    if statuses != {JobStatus.FINISHED}:
        raise RuntimeError(f"some jobs did not finish: {statuses}")
    return elapsed_ms / len(jobs)


def measure(url: str, llm: ScriptedLLM, model: str, tasks: int, label: str) -> tuple[float, float]:
    """Median per-task ms of no-op jobs and of run_task jobs on the worker now running."""
    rq_conn = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url, decode_responses=True)
    queue = Queue(QUEUE, connection=rq_conn)
    noop, team = [], []
    with tempfile.TemporaryDirectory() as workspace:
        # A warm-up of each kind, so worker start-up is not counted.
        per_task_ms(queue, [(NOOP_JOB, ())])
        for round_no in range(ROUNDS[label]):
            run_id = f"bench-{label}-{round_no}-{os.getpid()}"
            make_run(conn, run_id, model, llm.api_base, tasks + 1, Path(workspace))
            per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, "t0"))])
            noop.append(per_task_ms(queue, [(NOOP_JOB, ())] * tasks))
            team.append(per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, f"t{n}"))
                                            for n in range(1, tasks + 1)]))
            board = TaskBoard(conn, RunKeys(run_id))
            done = [t.status.value for t in board.snapshot()]
            if done.count("completed") != tasks + 1:
                raise RuntimeError(f"{label}: tasks not all completed: {done}")
    return statistics.median(noop), statistics.median(team)


def main() -> int:
    llm = ScriptedLLM()
    llm.start()
    model = llm.script("bench-member", ["done"], repeat_last=True)
    rows = []
    try:
        with throwaway_redis() as url, tempfile.TemporaryDirectory() as logs:
            preloaded = worker_command(url, [QUEUE])
            bare = [sys.executable, "-m", "rq.cli", "worker", "-u", url, QUEUE]
            simple = worker_command(url, [QUEUE], worker_class="rq.worker.SimpleWorker")
            warm_fork = worker_command(url, [QUEUE], worker_class=WARM_FORK)
            for label, command, tasks in (("preloaded", preloaded, PRELOADED_TASKS),
                                          ("warm-fork", warm_fork, PRELOADED_TASKS),
                                          ("bare", bare, BARE_TASKS),
                                          ("simple", simple, PRELOADED_TASKS)):
                with worker(command, Path(logs) / f"{label}.log", url):
                    noop_ms, task_ms = measure(url, llm, model, tasks, label)
                rows.append((label, command, tasks, noop_ms, task_ms))
    finally:
        llm.stop()
    return report(rows)


def report(rows: list[tuple[str, list[str], int, float, float]]) -> int:
    print("per-task time, one forking rq worker, median of "
          f"{' / '.join(f'{n} {k}' for k, n in ROUNDS.items())} rounds "
          "(zero-latency scripted model over HTTP through litellm)")
    print(f"{'worker':10} {'tasks':>5} {'no-op job ms':>13} {'run_task ms':>12} {'ratio':>6}")
    for label, _command, tasks, noop_ms, task_ms in rows:
        print(f"{label:10} {tasks:5d} {noop_ms:13.1f} {task_ms:12.1f} {task_ms / noop_ms:6.2f}")
    (_, preloaded_cmd, _, pre_noop, pre_task), (_, warm_cmd, _, warm_noop, warm_task), \
        (_, bare_cmd, _, _, bare_task), (_, simple_cmd, _, simple_noop, simple_task) = rows
    ratio = pre_task / pre_noop
    print(f"preloaded: {' '.join(preloaded_cmd[1:])}")
    print(f"warm-fork: {' '.join(warm_cmd[1:])}")
    print(f"bare:      {' '.join(bare_cmd[1:])}")
    print(f"simple:    {' '.join(simple_cmd[1:])}")
    print(f"run_task overhead vs a no-op job on the preloaded worker: {ratio:.2f}x "
          f"(goal <= {RATIO_GOAL}x): {'OK' if ratio <= RATIO_GOAL else 'MISSED'}")
    print("run_task overhead vs a no-op job on the warm-fork worker: "
          f"{warm_task / warm_noop:.2f}x; run_task there {warm_task:.1f} ms vs {pre_task:.1f} ms "
          "on the plain forking worker")
    print(f"run_task adds {pre_task - pre_noop:.1f} ms per task on the forking worker, "
          f"{simple_task - simple_noop:.1f} ms on SimpleWorker (no fork: litellm's first-call "
          "costs are paid once per process)")
    print(f"preload saves {bare_task - pre_task:.0f} ms per task "
          f"({bare_task / pre_task:.0f}x faster than a bare `rq worker {QUEUE}`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
