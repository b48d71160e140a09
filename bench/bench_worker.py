"""Worker benchmark: per-task overhead of `teamctl.worker.jobs.run_task` (claim, dispatch input, one
call to a zero-latency scripted model through litellm, fenced complete, result message) against a
bare RQ no-op job, measured in the same run, on RQ's forking worker preloaded by `-c
teamctl.worker.settings` (`-w teamctl.worker.rq_worker.TeamctlWorker`), then on the default worker
(WarmForkWorker: it forks each job's process ahead and warms it while idle), on a bare `rq worker
members` (no preload) to show what the preload saves, and on a preloaded SimpleWorker (no fork per
job). Queued jobs show throughput; paced ones, sent one at a time to an idle worker, show what a job
costs when the worker had time to prepare for it. The goal compares the default worker's run_task
with the no-op job of RQ's forking worker: what a task costs beyond what RQ itself costs. The
default worker also runs each round's tasks against the same scripted model served over HTTPS (a
self-signed certificate made for the run, trusted through SSL_CERT_FILE with verification on, in a
bundle with certifi's CAs as a provider's client would load): every forked job opens its own TLS
connection, so it pays a handshake per task.

Run: .venv/bin/python -m bench.bench_worker
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import certifi
import redis
from rq import Queue
from rq.job import Job, JobStatus
from teamctl.coordinator.local_workers.processes import (
    SETTINGS_MODULE,
    WorkerProcess,
    start_worker,
    stop_process,
    worker_command,
)
from teamctl.shared.board import TaskBoard
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV
from teamctl.shared.redis.connection import WORKER_CLASS, WORKER_CONNECTION_CLASS
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member

from bench import failed
from bench.figures import BenchFigure
from tests.support.llm import ScriptedLLM

QUEUE = "members"
FORKING = "teamctl.worker.rq_worker.TeamctlWorker"
"""RQ's forking worker with teamctl's preload and outage handling, without the default worker's
spare process (worker/warm_fork.py): the baseline's worker."""
PACE_S = 0.1
"""Paced jobs: one at a time, each enqueued this long after the last finished (an idle worker)."""
RATIO_GOAL = 1.3
WAIT_TIMEOUT_S = 300.0
NOOP_JOB = "os.getpid"
"""The baseline job: already imported in every worker, so it measures RQ's own per-job cost."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    preloaded_tasks: int
    """Queued tasks per round on a preloaded worker (every worker but the bare one)."""
    bare_tasks: int
    rounds: Mapping[str, int]
    """Rounds per worker, by label."""
    paced_jobs: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (see `worker`)."""


FULL = Sizes(
    preloaded_tasks=60,
    bare_tasks=3,
    rounds={"forking": 5, "warm-fork": 5, "bare": 1, "simple": 5},
    paced_jobs=20,
)
SMOKE = Sizes(
    preloaded_tasks=2,
    bare_tasks=1,
    rounds={"forking": 1, "warm-fork": 1, "bare": 1, "simple": 1},
    paced_jobs=2,
    fork_workers=True,
)
RQ_CLI = [sys.executable, "-m", "rq.cli"]


@contextmanager
def worker(
    command: list[str],
    log_path: Path,
    url: str,
    env_extra: dict[str, str] | None = None,
    *,
    forked: bool = False,
) -> Iterator[WorkerProcess]:
    """One rq worker process running `command` (`python -m rq.cli ...`), stopped by its pid
    (SIGTERM: RQ's warm shutdown). It is executed, as the figures assume; with `forked` (the
    smoke pass) it is forked by the fork server $TEAMCTL_WORKER_FORK_SERVER names, when it names
    one, as `teamctl run` would: an executed worker imports litellm, ~8 s of CPU."""
    if command[: len(RQ_CLI)] != RQ_CLI:
        raise ValueError(f"not an rq command of this Python: {command}")
    # teamctl.worker.settings sets litellm's offline cost map itself
    env = {**os.environ, **(env_extra or {})}
    if not forked:
        env.pop(FORK_SERVER_ENV, None)
    elif SETTINGS_MODULE in command:
        # The settings module starts a worker without teamctl's classes again with them, from
        # sys.orig_argv: in a forked worker that is the fork server's command line. Name the
        # classes that start would, unless the command's flags do.
        env.setdefault("RQ_CONNECTION_CLASS", WORKER_CONNECTION_CLASS)
        env.setdefault("RQ_WORKER_CLASS", WORKER_CLASS)
    conn = redis.Redis.from_url(url)
    with log_path.open("ab") as log:
        process = start_worker(command[len(RQ_CLI) :], env, log)
    try:
        try:
            wait_for_flag(lambda: conn.scard("rq:workers") >= 1, "the worker to register")
        except TimeoutError as exc:
            raise failed(f"{exc}: {' '.join(command[len(RQ_CLI) :])}", log_path) from exc
        yield process
    finally:
        stop_process(process, timeout_s=30)
        conn.delete("rq:workers", f"rq:workers:{QUEUE}")


def registered_pids(url: str) -> set[int]:
    """Pids of the workers in RQ's registry (a worker registers once its preload is done)."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    return {int(pid) for key in conn.smembers("rq:workers") if (pid := conn.hget(key, "pid"))}


@contextmanager
def worker_fleet(
    url: str, count: int, log_dir: Path, *, forked: bool = False
) -> Iterator[list[WorkerProcess]]:
    """`count` preloaded workers on QUEUE, yielded once each one is in RQ's registry (a stale
    registration must not let a measurement start while a worker still preloads); `forked` as
    for `worker`."""
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                worker(worker_command(url, [QUEUE]), log_dir / f"worker{n}.log", url, forked=forked)
            )
            for n in range(count)
        ]
        wait_for_flag(
            lambda: {p.pid for p in processes} <= registered_pids(url), f"{count} workers"
        )
        yield processes


def wait_for_flag(predicate: object, what: str) -> None:
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.005)  # polling a finished flag; nothing to block on


def make_run(
    conn: redis.Redis, run_id: str, model: str, api_base: str, tasks: int, workspace: Path
) -> None:
    spec = RunSpec(
        run_id=run_id,
        team_id="bench",
        objective="benchmark the worker",
        members=[Member(id="m1", model=model)],
        options=RunOptions(),
        models=ModelChoice(
            planner=model, synthesizer=model, member_default=model, api_base=api_base
        ),
        workspace_dir=str(workspace),
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(
        [TaskSpec(id=f"t{n}", member_id="m1", task=f"task {n}") for n in range(tasks)]
    )


def per_task_ms(
    queue: Queue, jobs: list[tuple[str, tuple[str, ...]]], meta: dict[str, str] | None = None
) -> float:
    """Enqueue the jobs at once (each with `meta`) and time until the last one (FIFO, one
    worker) finished."""
    started = time.perf_counter()
    enqueued = [
        queue.enqueue(fn, *args, job_timeout=600, result_ttl=600, meta=meta) for fn, args in jobs
    ]
    last = enqueued[-1]
    wait_for_flag(
        lambda: last.get_status(refresh=True) in (JobStatus.FINISHED, JobStatus.FAILED),
        "the last job",
    )
    elapsed_ms = (time.perf_counter() - started) * 1000
    statuses = {Job.fetch(j.id, connection=queue.connection).get_status() for j in enqueued}
    if statuses != {JobStatus.FINISHED}:
        raise RuntimeError(f"some jobs did not finish: {statuses}")
    return elapsed_ms / len(jobs)


Served = tuple[ScriptedLLM, str]
"""A scripted model server and the litellm model string scripted on it."""


def measure(
    url: str, servers: list[Served], tasks: int, rounds: int, label: str
) -> tuple[float, list[float]]:
    """Median per-task ms of no-op jobs and of run_task jobs against each server, on the worker
    now running; each round times them all, one after the other, so they share its conditions."""
    rq_conn = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url, decode_responses=True)
    queue = Queue(QUEUE, connection=rq_conn)
    noop: list[float] = []
    team: list[list[float]] = [[] for _ in servers]
    with tempfile.TemporaryDirectory() as workspace:
        # A warm-up of each kind, so worker start-up is not counted.
        per_task_ms(queue, [(NOOP_JOB, ())])
        for round_no in range(rounds):
            run_ids = [f"bench-{label}-{round_no}-{n}-{os.getpid()}" for n in range(len(servers))]
            for run_id, (llm, model) in zip(run_ids, servers, strict=True):
                make_run(conn, run_id, model, llm.api_base, tasks + 1, Path(workspace))
                per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, "t0"))])
            noop.append(per_task_ms(queue, [(NOOP_JOB, ())] * tasks))
            # Servers take turns going first, so neither always runs right after the no-op jobs.
            turns = list(zip(run_ids, team, strict=True))
            for run_id, times in turns if round_no % 2 == 0 else reversed(turns):
                times.append(
                    per_task_ms(
                        queue,
                        [
                            ("teamctl.worker.jobs.run_task", (run_id, f"t{n}"))
                            for n in range(1, tasks + 1)
                        ],
                    )
                )
            for run_id in run_ids:
                done = [t.status.value for t in TaskBoard(conn, RunKeys(run_id)).snapshot()]
                if done.count("completed") != tasks + 1:
                    raise RuntimeError(f"{label}: tasks not all completed: {done}")
    return statistics.median(noop), [statistics.median(times) for times in team]


def paced_ms(url: str, servers: list[Served], label: str, jobs: int) -> tuple[float, list[float]]:
    """Median enqueue-to-finished ms of `jobs` no-op and as many run_task jobs (against each
    server) sent one at a time, PACE_S after the last one finished: what a job costs a worker
    that was idle."""
    rq_conn = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url, decode_responses=True)
    queue = Queue(QUEUE, connection=rq_conn)
    run_ids = [f"bench-{label}-paced-{n}-{os.getpid()}" for n in range(len(servers))]
    with tempfile.TemporaryDirectory() as workspace:
        for run_id, (llm, model) in zip(run_ids, servers, strict=True):
            make_run(conn, run_id, model, llm.api_base, jobs, Path(workspace))
        noop: list[float] = []
        team: list[list[float]] = [[] for _ in servers]
        for n in range(jobs):
            time.sleep(PACE_S)  # pacing, not synchronization: the worker sits idle meanwhile
            noop.append(per_task_ms(queue, [(NOOP_JOB, ())]))
            for run_id, times in zip(run_ids, team, strict=True):
                time.sleep(PACE_S)
                times.append(
                    per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, f"t{n}"))])
                )
    return statistics.median(noop), [statistics.median(times) for times in team]


def rss_mb(pid: int) -> float:
    """Resident set size of a process in MiB (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def pss_mb(pid: int) -> float:
    """Proportional set size of a process in MiB (Pss in /proc/PID/smaps_rollup): each page
    it shares with other processes counted as its share, so a sum over processes that share
    pages (workers forked from one parent) counts each page once."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss for pid {pid}")


Row = tuple[
    str, list[str], int, float, float, tuple[float, float] | None, tuple[float, float | None] | None
]
"""label, command, tasks, no-op ms, run_task ms, paced (no-op, run_task) ms or None, and for
the worker also timed over HTTPS, run_task's (queued, paced) ms against the HTTPS server."""
HTTPS_WORKER = "warm-fork"
"""The worker timed over HTTPS too: the default one."""


def ca_bundle(llm: ScriptedLLM) -> Path:
    """certifi's CAs plus the scripted server's certificate, beside it: the worker loads a bundle
    of a provider client's size, and trusts the server (verification stays on)."""
    bundle = llm.ca_file.with_name("ca-bundle.pem")
    bundle.write_text(Path(certifi.where()).read_text() + llm.ca_file.read_text())
    return bundle


def collect(sizes: Sizes) -> tuple[list[Row], dict[str, float]]:
    """Each worker's row (see Row) and each idle worker's RSS in MiB after its jobs ran."""
    with ExitStack() as stack:
        llm, tls_llm = ScriptedLLM(), ScriptedLLM(tls=True)
        for server in (llm, tls_llm):
            server.start()
            stack.callback(server.stop)
        http: Served = (llm, llm.script("bench-member", ["done"], repeat_last=True))
        https: Served = (tls_llm, tls_llm.script("bench-member", ["done"], repeat_last=True))
        url = stack.enter_context(throwaway_redis())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        runs = (
            ("forking", worker_command(url, [QUEUE], worker_class=FORKING), sizes.preloaded_tasks),
            ("warm-fork", worker_command(url, [QUEUE]), sizes.preloaded_tasks),
            (
                "bare",
                [sys.executable, "-m", "rq.cli", "worker", "-u", url, QUEUE],
                sizes.bare_tasks,
            ),
            (
                "simple",
                worker_command(url, [QUEUE], worker_class="rq.worker.SimpleWorker"),
                sizes.preloaded_tasks,
            ),
        )
        rows: list[Row] = []
        rss: dict[str, float] = {}
        for label, command, tasks in runs:
            servers = [http, https] if label == HTTPS_WORKER else [http]
            # The worker trusts the HTTPS server from its start, as it would a provider's CA.
            env = {"SSL_CERT_FILE": str(ca_bundle(tls_llm))} if label == HTTPS_WORKER else None
            with worker(
                command, logs / f"{label}.log", url, env, forked=sizes.fork_workers
            ) as process:
                noop_ms, task_ms = measure(url, servers, tasks, sizes.rounds[label], label)
                paced = paced_ms(url, servers, label, sizes.paced_jobs) if label != "bare" else None
                rss[label] = rss_mb(process.pid)
            over_https = (
                (task_ms[1], paced[1][1] if paced else None) if label == HTTPS_WORKER else None
            )
            rows.append(
                (
                    label,
                    command,
                    tasks,
                    noop_ms,
                    task_ms[0],
                    (paced[0], paced[1][0]) if paced else None,
                    over_https,
                )
            )
    return rows, rss


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: run_task against a no-op job on each worker, queued and paced; RSS (the
    default sizes, or the smoke pass's)."""
    rows, rss = collect(SMOKE if smoke else FULL)
    out = goal_figures(rows)
    for label, _command, tasks, noop_ms, task_ms, paced, over_https in rows:
        out.append(
            BenchFigure(
                name=f"run_task, queued, {label} worker",
                value=task_ms,
                unit="ms",
                baseline=noop_ms,
                baseline_name="no-op RQ job, same worker",
                note=f"{tasks} tasks",
            )
        )
        if paced:
            out.append(
                BenchFigure(
                    name=f"run_task, paced, {label} worker",
                    value=paced[1],
                    unit="ms",
                    baseline=paced[0],
                    baseline_name="paced no-op RQ job, same worker",
                )
            )
        if over_https:
            out += https_figures(label, tasks, noop_ms, task_ms, paced, over_https)
    for label, mb in rss.items():
        out.append(
            BenchFigure(
                name=f"RSS of an idle {label} worker",
                value=mb,
                unit="MiB",
                baseline=rss.get("bare"),
                baseline_name="bare `rq worker`",
                note="after its jobs ran",
            )
        )
    return out


def goal_figures(rows: list[Row]) -> list[BenchFigure]:
    """run_task on the default worker against the no-op job of RQ's forking worker, queued and
    paced: the goal's figures."""
    by_label = {row[0]: row for row in rows}
    _, _, tasks, noop_ms, _, paced_noop, _ = by_label["forking"]
    _, _, _, _, task_ms, paced_task, _ = by_label["warm-fork"]
    out = [
        BenchFigure(
            name="run_task, queued, default worker",
            value=task_ms,
            unit="ms",
            baseline=noop_ms,
            baseline_name="no-op RQ job, RQ's forking worker",
            goal=f"ratio <= {RATIO_GOAL}",
            met=task_ms / noop_ms <= RATIO_GOAL,
            note=f"{tasks} tasks",
        )
    ]
    if paced_noop and paced_task:
        out.append(
            BenchFigure(
                name="run_task, paced, default worker",
                value=paced_task[1],
                unit="ms",
                baseline=paced_noop[0],
                baseline_name="paced no-op RQ job, RQ's forking worker",
                goal=f"ratio <= {RATIO_GOAL}",
                met=paced_task[1] / paced_noop[0] <= RATIO_GOAL,
            )
        )
    return out


def https_figures(
    label: str,
    tasks: int,
    noop_ms: float,
    task_ms: float,
    paced: tuple[float, float] | None,
    over_https: tuple[float, float | None],
) -> list[BenchFigure]:
    """run_task against the HTTPS server, beside the same worker's no-op job and its run_task
    over HTTP, from the same rounds: what a TLS handshake per forked job adds."""
    note = "verified self-signed cert, loopback; a handshake per job"
    out = [
        BenchFigure(
            name=f"run_task over HTTPS, queued, {label} worker",
            value=over_https[0],
            unit="ms",
            baseline=noop_ms,
            baseline_name="no-op RQ job, same worker",
            note=f"{tasks} tasks; {note}",
        ),
        BenchFigure(
            name=f"HTTPS vs HTTP: run_task, queued, {label} worker",
            value=over_https[0],
            unit="ms",
            baseline=task_ms,
            baseline_name="run_task over HTTP, same rounds",
        ),
    ]
    if paced and over_https[1] is not None:
        out += [
            BenchFigure(
                name=f"run_task over HTTPS, paced, {label} worker",
                value=over_https[1],
                unit="ms",
                baseline=paced[0],
                baseline_name="paced no-op RQ job, same worker",
                note=note,
            ),
            BenchFigure(
                name=f"HTTPS vs HTTP: run_task, paced, {label} worker",
                value=over_https[1],
                unit="ms",
                baseline=paced[1],
                baseline_name="paced run_task over HTTP, same rounds",
            ),
        ]
    return out


def main() -> int:
    rows, rss = collect(FULL)
    report(rows, FULL)
    print("idle worker RSS: " + ", ".join(f"{label} {mb:.0f} MiB" for label, mb in rss.items()))
    return 0


def report(rows: list[Row], sizes: Sizes) -> int:
    print(
        "per-task time, one rq worker, median of "
        f"{' / '.join(f'{n} {k}' for k, n in sizes.rounds.items())} rounds "
        "(zero-latency scripted model over HTTP through litellm, and over HTTPS on the "
        f"{HTTPS_WORKER} worker); queued: jobs enqueued at once, "
        f"paced: {sizes.paced_jobs} jobs one at a time, each {PACE_S:.1f} s after the last "
        "finished"
    )
    print(
        f"{'worker':15} {'tasks':>5} {'no-op job ms':>13} {'run_task ms':>12} {'ratio':>6}"
        f" {'paced no-op ms':>15} {'paced run_task ms':>18} {'ratio':>6}"
    )
    for label, _command, tasks, noop_ms, task_ms, paced, _https in rows:
        paced_cols = (
            f" {paced[0]:15.1f} {paced[1]:18.1f} {paced[1] / paced[0]:6.2f}" if paced else ""
        )
        print(
            f"{label:15} {tasks:5d} {noop_ms:13.1f} {task_ms:12.1f} {task_ms / noop_ms:6.2f}"
            + paced_cols
        )
    by_label = {row[0]: row for row in rows}
    for label, row in by_label.items():
        print(f"{label + ':':15} {' '.join(row[1][1:])}")
    _, _, _, pre_noop, pre_task, pre_paced, _ = by_label["forking"]
    _, _, _, fork_noop, fork_task, fork_paced, pre_https = by_label["warm-fork"]
    _, _, _, simple_noop, simple_task, _, _ = by_label["simple"]
    bare_task = by_label["bare"][4]
    ratio = fork_task / pre_noop
    print(
        f"run_task on the default worker vs a no-op job on RQ's forking worker: {ratio:.2f}x "
        f"(goal <= {RATIO_GOAL}x): {'OK' if ratio <= RATIO_GOAL else 'MISSED'}; "
        f"{pre_task / pre_noop:.2f}x on RQ's forking worker"
    )
    if pre_paced and fork_paced:
        print(
            f"paced (an idle worker): run_task {fork_paced[1]:.1f} ms on the default worker "
            f"({fork_paced[1] / pre_paced[0]:.2f}x the forking worker's no-op job) vs "
            f"{pre_paced[1]:.1f} ms on RQ's forking worker ({pre_paced[1] / pre_paced[0]:.2f}x)"
        )
    print(
        f"run_task adds {pre_task - pre_noop:.1f} ms per task on RQ's forking worker, "
        f"{fork_task - fork_noop:.1f} ms on the default worker, "
        f"{simple_task - simple_noop:.1f} ms on SimpleWorker (no fork: litellm's first-call "
        "costs are paid once per process)"
    )
    if pre_https:
        print(
            f"HTTPS (a TLS handshake per forked job): run_task {pre_https[0]:.1f} ms "
            f"({pre_https[0] / fork_noop:.2f}x the no-op job) vs {fork_task:.1f} ms over HTTP, "
            f"{pre_https[0] - fork_task:+.1f} ms per task"
            + (
                f"; paced {pre_https[1]:.1f} vs {fork_paced[1]:.1f} ms"
                if pre_https[1] is not None and fork_paced
                else ""
            )
        )
    print(
        f"preload saves {bare_task - pre_task:.0f} ms per task "
        f"({bare_task / pre_task:.0f}x faster than a bare `rq worker {QUEUE}`)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
