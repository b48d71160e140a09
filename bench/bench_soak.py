"""Soak, compressed: for `--minutes`, short planned runs one after another (zero-latency
scripted model, `--tasks` tasks each, ended runs kept `retention_s` 30 s) while a team of
`--mates` teammates takes a turn per run (a message each), on `--workers` preloaded workers.

Figures: Redis `used_memory` and the workers' RSS (their main processes: work horses come and
go) at the end against the start, both sampled at the same point of a cycle (the run ended, the
teammates idle); the start is taken after a warm-up of a minute (past the retention, so expired
runs balance new ones), goal: within 10%. Also cycles, runs and turns done, the slowest script
SLOWLOG recorded, and nothing lost (every run completed).

Run: .venv/bin/python -m bench.bench_soak [--minutes M] [--tasks T] [--mates N] [--workers K]
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis
from teamctl.shared.keys import TeamKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.teams.options import TeamOptions
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from bench import failed, slowlog
from bench.bench_concurrent_runs import write_team
from bench.bench_startup import teamctl
from bench.bench_worker import QUEUE, wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

WARM_UP_S = 60.0
RETENTION_S = 30
GOAL_GROWTH = 0.10
TEAM = "soak"
RUN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    minutes: float
    tasks: int
    mates: int
    workers: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(minutes=30.0, tasks=5, mates=4, workers=4)
SMOKE = Sizes(minutes=0.05, tasks=2, mates=1, workers=1, fork_workers=True)


def all_idle(conn: redis.Redis, names: list[str]) -> bool:
    return all(
        conn.hget(TeamKeys(TEAM).teammate(name), "status") == TeammateStatus.IDLE.value
        for name in names
    )


def sample(conn: redis.Redis, workers: list[psutil.Process]) -> tuple[int, int]:
    """(Redis used_memory, the workers' RSS) in bytes."""
    return (int(conn.info("memory")["used_memory"]), sum(p.memory_info().rss for p in workers))


def cycle(
    llm: ScriptedLLM,
    url: str,
    team: Path,
    run_id: str,
    store: TeamStore,
    names: list[str],
    log_dir: Path,
) -> None:
    """One short run while every teammate takes a turn; returns once all of it ended."""
    with (log_dir / "run.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                *teamctl(),
                "run",
                "Short run",
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
        )
        for name in names:
            store.messages.send("lead", name, f"Anything new for {run_id}?")
        if proc.wait(timeout=RUN_TIMEOUT_S) != 0:
            raise failed(f"run {run_id} exited {proc.returncode}", log_dir / "run.log")
    wait_for_flag(lambda: all_idle(store.conn, names), "the teammates idle")


def run(sizes: Sizes) -> list[BenchFigure]:
    minutes, tasks, mates, workers = sizes.minutes, sizes.tasks, sizes.mates, sizes.workers
    llm = ScriptedLLM()
    llm.start()
    mate_model = llm.script("mate", ["ok"], repeat_last=True)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
            worker_fleet(url, workers, Path(tmp_dir), forked=sizes.fork_workers) as fleet,
        ):
            tmp = Path(tmp_dir)
            conn = redis.Redis.from_url(url, decode_responses=True)
            procs = [psutil.Process(p.pid) for p in fleet]
            team = write_team(
                tmp / "team.toml",
                llm,
                tasks,
                {"max_concurrency": tasks, "retention_s": RETENTION_S},
            )
            store = TeamStore(conn, TEAM)
            store.create(TeamOptions(max_teammates=max(mates, 1)))
            names = [f"mate{n}" for n in range(mates)]
            for name in names:
                store.spawn(
                    name,
                    role="dev",
                    prompt="Say ok.",
                    model=mate_model,
                    api_base=llm.api_base,
                    queue=QUEUE,
                )
            wait_for_flag(lambda: all_idle(conn, names), "the teammates idle")
            slowlog.watch(conn)
            started = time.monotonic()
            end = started + minutes * 60
            warm_up_s = min(WARM_UP_S, minutes * 60 / 3)
            first: tuple[int, int] | None = None
            cycles = 0
            while time.monotonic() < end:
                cycle(llm, url, team, f"soak-{cycles}", store, names, tmp)
                cycles += 1
                if first is None and time.monotonic() - started >= warm_up_s:
                    first = sample(conn, procs)
            last = sample(conn, procs)
            worst = slowlog.slowest(conn)
            turns = len(llm.requests["mate"])
    finally:
        llm.stop()
    if first is None:
        raise RuntimeError("the soak ended before its warm-up did: give it more --minutes")
    rows = []
    for index, what in ((0, "Redis used_memory"), (1, f"RSS of the {workers} workers")):
        growth = last[index] / first[index] - 1
        rows.append(
            BenchFigure(
                name=f"{what}, end ({minutes:g} min soak)",
                value=last[index] / 1024 / 1024,
                unit="MiB",
                baseline=first[index] / 1024 / 1024,
                baseline_name=f"after {warm_up_s:.0f} s warm-up",
                goal=f"within {GOAL_GROWTH:.0%}",
                met=abs(growth) <= GOAL_GROWTH,
                note=f"{growth:+.1%}",
            )
        )
    rows.append(
        BenchFigure(
            name="cycles (a run and a turn per teammate)",
            value=cycles,
            unit="cycles",
            note=f"{cycles * tasks} tasks, {turns} teammate model "
            f"calls, {mates} teammates; every run completed",
        )
    )
    rows.append(
        BenchFigure(
            name="slowest script, whole soak (SLOWLOG)",
            value=worst.ms,
            unit="ms",
            goal="<= 5 ms",
            met=worst.ms <= slowlog.SLOW_US / 1000,
            note=worst.note(),
        )
    )
    return rows


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default length, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=FULL.minutes)
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    parser.add_argument("--mates", type=int, default=FULL.mates)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    args = parser.parse_args(argv)
    return print_figures(
        run(Sizes(minutes=args.minutes, tasks=args.tasks, mates=args.mates, workers=args.workers))
    )


if __name__ == "__main__":
    sys.exit(main())
