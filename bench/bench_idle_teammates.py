"""Idle teammates at scale: `--mates` persistent teammates of one team, each idle after its first
turn (zero-latency scripted model), on `--workers` preloaded workers.

Figures, over a quiet window of `--quiet-s` seconds: RQ jobs run, model calls, script calls
(INFO commandstats: EVAL and EVALSHA) and the workers' CPU (theirs and their work horses'), each
against the same workers over the same window before the team existed (goal: 0 jobs, model
calls and script calls; CPU no more than without the team). Then the wake: a message to an idle
teammate until its turn's first model request, against a no-op RQ job's enqueue to its start on
the same workers (goal: p50 <= 2x). The model request comes after the turn has begun, so the
wake is measured on the safe side.

Run: .venv/bin/python -m bench.bench_idle_teammates [--mates N] [--workers K] [--quiet-s S]
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis
from rq import Queue, Worker
from rq.job import Job, JobStatus
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from bench import slowlog
from bench.bench_worker import NOOP_JOB, QUEUE, wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

GOAL_WAKE_RATIO = 2.0
TEAM = "idle"
MODEL = "mate"
SETTLE_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    mates: int
    workers: int
    quiet_s: float
    wakes: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(mates=1000, workers=4, quiet_s=60.0, wakes=20)
SMOKE = Sizes(mates=3, workers=1, quiet_s=1.0, wakes=2, fork_workers=True)


class Activity:
    """Counters that must not move while every teammate is idle."""

    def __init__(self, url: str, pids: list[int], llm: ScriptedLLM) -> None:
        self.rq_conn = redis.Redis.from_url(url)
        self.conn = redis.Redis.from_url(url, decode_responses=True)
        self.procs = [psutil.Process(pid) for pid in pids]
        self.llm = llm

    def read(self) -> dict[str, float]:
        stats = self.conn.info("commandstats")
        workers = Worker.all(connection=self.rq_conn)
        cpu = sum(sum(p.cpu_times()[:4]) for p in self.procs)
        return {
            "jobs": sum(w.successful_job_count + w.failed_job_count for w in workers),
            "model calls": len(self.llm.requests.get(MODEL, [])),
            "script calls": sum(
                stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("eval", "evalsha")
            ),
            "worker CPU": cpu,
        }

    def over(self, seconds: float) -> dict[str, float]:
        """How far each counter moved in `seconds` of waiting (the window being measured)."""
        before = self.read()
        time.sleep(seconds)
        after = self.read()
        return {name: after[name] - before[name] for name in before}


def idle_count(conn: redis.Redis, names: list[str]) -> int:
    pipe = conn.pipeline(transaction=False)
    for name in names:
        pipe.hget(TeamKeys(TEAM).teammate(name), "status")
    return sum(status == TeammateStatus.IDLE.value for status in pipe.execute())


def spawn_all(store: TeamStore, llm: ScriptedLLM, mates: int) -> list[str]:
    """Spawn every teammate and wait until each has ended its first turn."""
    names = [f"mate{n}" for n in range(mates)]
    for name in names:
        store.spawn(
            name,
            role="dev",
            prompt="Say ok.",
            model=f"openai/{MODEL}",
            api_base=llm.api_base,
            queue=QUEUE,
        )
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while idle_count(store.conn, names) < mates:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{mates - idle_count(store.conn, names)} teammates never idled")
        time.sleep(0.5)  # polling a count that only grows; nothing to block on
    return names


def wake_s(store: TeamStore, llm: ScriptedLLM, name: str) -> float:
    """A message to an idle teammate until its turn's first model request; then it idles."""
    seen = len(llm.request_times[MODEL])
    started = time.monotonic()
    _, woke = store.messages.send("lead", name, "Anything new?")
    if not woke:
        raise RuntimeError(f"{name} was not woken")
    wait_for_flag(lambda: len(llm.request_times[MODEL]) > seen, f"{name}'s turn")
    elapsed = llm.request_times[MODEL][seen] - started
    wait_for_flag(lambda: idle_count(store.conn, [name]) == 1, f"{name} idle again")
    return elapsed


def noop_start_s(queue: Queue) -> float:
    """A no-op RQ job's enqueue until a worker started it (the worker's own timestamp)."""
    started = time.time()
    job = queue.enqueue(NOOP_JOB, result_ttl=600)
    wait_for_flag(lambda: job.get_status(refresh=True) == JobStatus.FINISHED, "a no-op job")
    begun = Job.fetch(job.id, connection=queue.connection).started_at
    assert begun is not None
    return begun.timestamp() - started


def run(sizes: Sizes) -> list[BenchFigure]:
    mates, workers, quiet_s, wakes_count = sizes.mates, sizes.workers, sizes.quiet_s, sizes.wakes
    llm = ScriptedLLM()
    llm.start()
    llm.script(MODEL, ["ok"], repeat_last=True)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp,
            throwaway_redis(Path(tmp)) as url,
            worker_fleet(url, workers, Path(tmp), forked=sizes.fork_workers) as fleet,
        ):
            conn = redis.Redis.from_url(url, decode_responses=True)
            activity = Activity(url, [p.pid for p in fleet], llm)
            without = activity.over(quiet_s)
            store = TeamStore(conn, TEAM)
            store.create(TeamOptions(max_teammates=max(mates, 1)))
            spawned = time.monotonic()
            names = spawn_all(store, llm, mates)
            settle_s = time.monotonic() - spawned
            slowlog.watch(conn)
            idle = activity.over(quiet_s)
            quiet_worst = slowlog.slowest(conn)
            queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
            wakes, noops = [], []
            for n in range(wakes_count):  # interleaved: load from elsewhere hits both alike
                noops.append(noop_start_s(queue))
                wakes.append(wake_s(store, llm, names[n * len(names) // wakes_count]))
            wake_worst = slowlog.slowest(conn)
    finally:
        llm.stop()
    label = f"{mates} idle teammates, {workers} workers, {quiet_s:.0f} s"
    rows = [
        BenchFigure(
            name=f"{what} ({label})" if what == "jobs" else what,
            value=idle[what],
            unit=unit,
            baseline=without[what],
            baseline_name="same workers, no team",
            goal="0",
            met=idle[what] == 0,
        )
        for what, unit in (("jobs", "jobs"), ("model calls", "calls"), ("script calls", "calls"))
    ]
    rows.append(
        BenchFigure(
            name="worker CPU",
            value=idle["worker CPU"],
            unit="s",
            baseline=without["worker CPU"],
            baseline_name="same workers, no team",
            goal="no more than with no team (idle RQ upkeep)",
            met=idle["worker CPU"] <= max(without["worker CPU"] * 1.1, 0.05),
            note=f"{workers} workers and their work horses",
        )
    )
    wake, noop = statistics.median(wakes), statistics.median(noops)
    rows.append(
        BenchFigure(
            name="wake p50: message to an idle teammate -> its model request",
            value=wake * 1000,
            unit="ms",
            baseline=noop * 1000,
            baseline_name="no-op RQ job, enqueue -> start",
            goal=f"ratio <= {GOAL_WAKE_RATIO}",
            met=wake <= GOAL_WAKE_RATIO * noop,
            note=f"{wakes_count} wakes",
        )
    )
    rows.append(
        BenchFigure(name="spawn to all idle", value=settle_s, unit="s", note=f"{mates} first turns")
    )
    for scenario, worst in (("quiet window", quiet_worst), ("wakes", wake_worst)):
        rows.append(
            BenchFigure(
                name=f"slowest script, {scenario} (SLOWLOG)",
                value=worst.ms,
                unit="ms",
                goal="<= 5 ms",
                met=worst.ms <= slowlog.SLOW_US / 1000,
                note=worst.note(),
            )
        )
    return rows


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mates", type=int, default=FULL.mates)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    parser.add_argument("--quiet-s", type=float, default=FULL.quiet_s)
    args = parser.parse_args(argv)
    return print_figures(
        run(Sizes(mates=args.mates, workers=args.workers, quiet_s=args.quiet_s, wakes=FULL.wakes))
    )


if __name__ == "__main__":
    sys.exit(main())
