"""Worker benchmark: per-task overhead of `teamctl.worker.jobs.run_task` (claim, dispatch input,
one call to a zero-latency scripted model through litellm, fenced complete, result message) against
a bare RQ no-op job on the same worker, measured in the same run, on the documented worker
(RQ's forking worker preloaded by `-c teamctl.worker.settings`); then both again on the
experimental `-w teamctl.worker.warm_fork.WarmForkWorker` (forks and warms each job's process
ahead), on a bare `rq worker members` (no preload) to show what the preload saves, and on a
preloaded SimpleWorker (no fork per job). Queued jobs show throughput; paced ones, sent one at a
time to an idle worker, show what a job costs when the worker had time to prepare for it.
The documented worker runs once more against the same scripted model served over HTTPS (a
self-signed certificate made for the run, trusted through SSL_CERT_FILE with verification on, in a
bundle with certifi's CAs as a provider's client would load): every forked job opens its own TLS
connection, so it pays a handshake per task.

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
from contextlib import ExitStack, contextmanager
from pathlib import Path

import certifi
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

from bench.figures import BenchFigure
from tests.scripted_llm import ScriptedLLM

QUEUE = "members"
PRELOADED_TASKS = 60
BARE_TASKS = 3
ROUNDS = {"preloaded": 5, "preloaded-https": 5, "warm-fork": 5, "bare": 1, "simple": 5}
WARM_FORK = "teamctl.worker.warm_fork.WarmForkWorker"
"""The experimental worker class that forks and warms each job's process ahead (not the default:
see worker/warm_fork.py)."""
PACED_JOBS = 20
PACE_S = 0.1
"""Paced jobs: one at a time, each enqueued this long after the last finished (an idle worker)."""
RATIO_GOAL = 1.5
WAIT_TIMEOUT_S = 300.0
NOOP_JOB = "os.getpid"
"""The baseline job: already imported in every worker, so it measures RQ's own per-job cost."""


@contextmanager
def worker(command: list[str], log_path: Path, url: str,
           env_extra: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """One rq worker process, stopped by its pid (SIGTERM: RQ's warm shutdown)."""
    # teamctl.worker.settings sets litellm's offline cost map itself
    env = {**os.environ, **(env_extra or {})}
    conn = redis.Redis.from_url(url)
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
    try:
        _wait(lambda: conn.scard("rq:workers") >= 1, "the worker to register")
        yield process
    finally:
        stop_process(process, timeout_s=30)
        conn.delete("rq:workers", f"rq:workers:{QUEUE}")


def registered_pids(url: str) -> set[int]:
    """Pids of the workers in RQ's registry (a worker registers once its preload is done)."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    return {int(pid) for key in conn.smembers("rq:workers")
            if (pid := conn.hget(key, "pid"))}


@contextmanager
def worker_fleet(url: str, count: int, log_dir: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`count` preloaded workers on QUEUE, yielded once each one is in RQ's registry (a stale
    registration must not let a measurement start while a worker still preloads)."""
    with ExitStack() as stack:
        processes = [stack.enter_context(worker(worker_command(url, [QUEUE]),
                                                log_dir / f"worker{n}.log", url))
                     for n in range(count)]
        _wait(lambda: {p.pid for p in processes} <= registered_pids(url), f"{count} workers")
        yield processes


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


def paced_ms(url: str, llm: ScriptedLLM, model: str, label: str) -> tuple[float, float]:
    """Median enqueue-to-finished ms of no-op and of run_task jobs sent one at a time, PACE_S
    after the last one finished: what a job costs a worker that was idle."""
    rq_conn = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url, decode_responses=True)
    queue = Queue(QUEUE, connection=rq_conn)
    run_id = f"bench-{label}-paced-{os.getpid()}"
    with tempfile.TemporaryDirectory() as workspace:
        make_run(conn, run_id, model, llm.api_base, PACED_JOBS, Path(workspace))
        noop, team = [], []
        for n in range(PACED_JOBS):
            time.sleep(PACE_S)  # pacing, not synchronization: the worker sits idle meanwhile
            noop.append(per_task_ms(queue, [(NOOP_JOB, ())]))
            time.sleep(PACE_S)
            team.append(per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, f"t{n}"))]))
    return statistics.median(noop), statistics.median(team)


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


Row = tuple[str, list[str], int, float, float, tuple[float, float] | None]
HTTPS = "preloaded-https"
"""The documented worker against the scripted model over HTTPS."""
NO_RSS = {HTTPS}
"""Workers whose RSS is not reported: the same worker as another row."""


def ca_bundle(llm: ScriptedLLM) -> Path:
    """certifi's CAs plus the scripted server's certificate, beside it: the worker loads a bundle
    of a provider client's size, and trusts the server (verification stays on)."""
    bundle = llm.ca_file.with_name("ca-bundle.pem")
    bundle.write_text(Path(certifi.where()).read_text() + llm.ca_file.read_text())
    return bundle


def collect() -> tuple[list[Row], dict[str, float]]:
    """Each worker's (label, command, tasks, no-op ms, run_task ms, paced) and each idle worker's
    RSS in MiB after its jobs ran."""
    with ExitStack() as stack:
        llm, tls_llm = ScriptedLLM(), ScriptedLLM(tls=True)
        for server in (llm, tls_llm):
            server.start()
            stack.callback(server.stop)
        model = llm.script("bench-member", ["done"], repeat_last=True)
        tls_model = tls_llm.script("bench-member", ["done"], repeat_last=True)
        url = stack.enter_context(throwaway_redis())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        preloaded = worker_command(url, [QUEUE])
        https_env = {"SSL_CERT_FILE": str(ca_bundle(tls_llm))}
        runs = (("preloaded", preloaded, PRELOADED_TASKS, llm, model, None),
                (HTTPS, preloaded, PRELOADED_TASKS, tls_llm, tls_model, https_env),
                ("warm-fork", worker_command(url, [QUEUE], worker_class=WARM_FORK),
                 PRELOADED_TASKS, llm, model, None),
                ("bare", [sys.executable, "-m", "rq.cli", "worker", "-u", url, QUEUE],
                 BARE_TASKS, llm, model, None),
                ("simple", worker_command(url, [QUEUE], worker_class="rq.worker.SimpleWorker"),
                 PRELOADED_TASKS, llm, model, None))
        rows: list[Row] = []
        rss: dict[str, float] = {}
        for label, command, tasks, server, served, env in runs:
            with worker(command, logs / f"{label}.log", url, env) as process:
                noop_ms, task_ms = measure(url, server, served, tasks, label)
                paced = paced_ms(url, server, served, label) if label != "bare" else None
                if label not in NO_RSS:
                    rss[label] = rss_mb(process.pid)
            rows.append((label, command, tasks, noop_ms, task_ms, paced))
    return rows, rss


def figures() -> list[BenchFigure]:
    """The report's rows: run_task against a no-op job on each worker, queued and paced; RSS."""
    rows, rss = collect()
    out = []
    for label, _command, tasks, noop_ms, task_ms, paced in rows:
        goal = label == "preloaded"
        out.append(BenchFigure(
            name=f"run_task, queued, {_describe(label)}", value=task_ms, unit="ms",
            baseline=noop_ms, baseline_name="no-op RQ job, same worker",
            goal=f"ratio <= {RATIO_GOAL}" if goal else "",
            met=task_ms / noop_ms <= RATIO_GOAL if goal else None, note=f"{tasks} tasks"))
        if paced:
            out.append(BenchFigure(name=f"run_task, paced, {_describe(label)}", value=paced[1],
                                   unit="ms", baseline=paced[0],
                                   baseline_name="paced no-op RQ job, same worker"))
    by_label = {row[0]: row for row in rows}
    http, https = by_label["preloaded"], by_label[HTTPS]
    out.append(BenchFigure(name="TLS: run_task over HTTPS, queued, preloaded worker",
                           value=https[4], unit="ms", baseline=http[4],
                           baseline_name="run_task over HTTP, preloaded worker",
                           note="a handshake per task: each forked job connects anew"))
    for label, mb in rss.items():
        out.append(BenchFigure(name=f"RSS of an idle {label} worker", value=mb, unit="MiB",
                               baseline=rss.get("bare"), baseline_name="bare `rq worker`",
                               note="after its jobs ran"))
    return out


def _describe(label: str) -> str:
    """A worker's row name: the HTTPS run is the preloaded worker with another model server."""
    return "preloaded worker, model over HTTPS" if label == HTTPS else f"{label} worker"


def main() -> int:
    rows, rss = collect()
    report(rows)
    print("idle worker RSS: " + ", ".join(f"{label} {mb:.0f} MiB" for label, mb in rss.items()))
    return 0


def report(rows: list[Row]) -> int:
    print("per-task time, one rq worker, median of "
          f"{' / '.join(f'{n} {k}' for k, n in ROUNDS.items())} rounds "
          "(zero-latency scripted model over HTTP through litellm; over HTTPS for "
          f"{HTTPS}); queued: jobs enqueued at once, "
          f"paced: {PACED_JOBS} jobs one at a time, each {PACE_S:.1f} s after the last finished")
    print(f"{'worker':15} {'tasks':>5} {'no-op job ms':>13} {'run_task ms':>12} {'ratio':>6}"
          f" {'paced no-op ms':>15} {'paced run_task ms':>18} {'ratio':>6}")
    for label, _command, tasks, noop_ms, task_ms, paced in rows:
        paced_cols = (f" {paced[0]:15.1f} {paced[1]:18.1f} {paced[1] / paced[0]:6.2f}"
                      if paced else "")
        print(f"{label:15} {tasks:5d} {noop_ms:13.1f} {task_ms:12.1f} {task_ms / noop_ms:6.2f}"
              + paced_cols)
    by_label = {row[0]: row for row in rows}
    for label, row in by_label.items():
        print(f"{label + ':':15} {' '.join(row[1][1:])}")
    _, _, _, pre_noop, pre_task, pre_paced = by_label["preloaded"]
    _, _, _, fork_noop, fork_task, fork_paced = by_label["warm-fork"]
    _, _, _, simple_noop, simple_task, _ = by_label["simple"]
    bare_task = by_label["bare"][4]
    _, _, _, tls_noop, tls_task, tls_paced = by_label[HTTPS]
    ratio = pre_task / pre_noop
    print(f"run_task overhead vs a no-op job on the preloaded worker: {ratio:.2f}x "
          f"(goal <= {RATIO_GOAL}x): {'OK' if ratio <= RATIO_GOAL else 'MISSED'}; "
          f"{fork_task / fork_noop:.2f}x on WarmForkWorker")
    if pre_paced and fork_paced:
        print(f"paced (an idle worker): run_task {pre_paced[1]:.1f} ms on the preloaded worker "
              f"({pre_paced[1] / pre_paced[0]:.2f}x its no-op job) vs {fork_paced[1]:.1f} ms on "
              f"WarmForkWorker ({fork_paced[1] / fork_paced[0]:.2f}x)")
    print(f"run_task adds {pre_task - pre_noop:.1f} ms per task on the preloaded worker, "
          f"{fork_task - fork_noop:.1f} ms on WarmForkWorker, "
          f"{simple_task - simple_noop:.1f} ms on SimpleWorker (no fork: litellm's first-call "
          "costs are paid once per process)")
    print(f"HTTPS (a TLS handshake per forked job): run_task {tls_task:.1f} ms "
          f"({tls_task / tls_noop:.2f}x its no-op job) vs {pre_task:.1f} ms over HTTP: "
          f"{tls_task - pre_task:+.1f} ms per task"
          + (f"; paced {tls_paced[1]:.1f} vs {pre_paced[1]:.1f} ms"
             if tls_paced and pre_paced else ""))
    print(f"preload saves {bare_task - pre_task:.0f} ms per task "
          f"({bare_task / pre_task:.0f}x faster than a bare `rq worker {QUEUE}`)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
