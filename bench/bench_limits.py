"""Provider limits shared by the fleet: goodput against a rate-limited provider, and what the
limiter costs when no limit applies, each against the same fleet with the limiter off
(TEAMCTL_LIMITS=off: every worker backs off alone) in the same run of the benchmark.

Goodput: a scripted provider with a token bucket of `--rps` requests a second (burst the same,
429 with Retry-After and OpenAI's x-ratelimit-* headers past it; the limiter learns the limit
from them, nothing is configured), `--workers` workers, `--runs` concurrent `teamctl run`s of
`--tasks` independent tasks. Figures: member requests served per second (first to last served)
against R, the share refused, tasks completed.
Overhead: one run of `--free-tasks` zero-latency tasks on an unlimited model: the time per task
with the limiter against without.

Run: .venv/bin/python -m bench.bench_limits [--rps R] [--runs N] [--tasks T] [--workers K]
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.task_records import TaskState, TaskStatus

from bench.bench_startup import teamctl
from bench.bench_worker import registered_pids, wait_for_flag, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM
from tests.support.rate_limited import RateLimitedProvider

REFUSED_GOAL = 0.05
GOODPUT_GOAL = 0.9
OVERHEAD_GOAL = 1.03
MODES = {"on": {}, "off": {"TEAMCTL_LIMITS": "off"}}
"""The limiter on (no setting: limits learned) and off, each fleet's extra environment."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    rps: float
    runs: int
    tasks: int
    workers: int
    free_tasks: int
    rounds: int = 2
    """Overhead runs per fleet, alternated between the fleets (the median is kept)."""
    fork_workers: bool = False


FULL = Sizes(rps=4.0, runs=3, tasks=40, workers=8, free_tasks=200, rounds=5)
SMOKE = Sizes(rps=20.0, runs=1, tasks=4, workers=2, free_tasks=4, rounds=1, fork_workers=True)


@contextmanager
def fleet(
    url: str, count: int, queue: str, log_dir: Path, env: dict[str, str], forked: bool
) -> Iterator[None]:
    """`count` preloaded workers on `queue` with `env` added, registered before it yields."""
    with ExitStack() as stack:
        processes = [
            stack.enter_context(
                worker(
                    worker_command(url, [queue]),
                    log_dir / f"worker{n}.log",
                    url,
                    env,
                    forked=forked,
                )
            )
            for n in range(count)
        ]
        wait_for_flag(
            lambda: {p.pid for p in processes} <= registered_pids(url),
            f"{count} workers on {queue}",
        )
        yield


def write_team(
    path: Path, llm: ScriptedLLM, tag: str, member: str, tasks: int, workers: int, queue: str
) -> Path:
    """A one-member team on `queue` whose planner plans `tasks` independent tasks for model
    `member`."""
    plan = {"tasks": [{"id": f"t{n}", "memberId": "m1", "task": f"task {n}"} for n in range(tasks)]}
    planner = llm.script(f"plan-{tag}", [json.dumps(plan)], repeat_last=True)
    synth = llm.script(f"synth-{tag}", ["final"], repeat_last=True)
    path.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{planner}", queue = "{queue}" }}',
                f'synthesizer = {{ model = "{synth}", queue = "{queue}" }}',
                f'model = "openai/{member}"',
                "[[members]]",
                'id = "m1"',
                f'queue = "{queue}"',
                "[options]",
                f"max_concurrency = {2 * workers}",
                "max_rounds = 1000",
                "dependency_output_chars = 0",
            ]
        )
        + "\n"
    )
    return path


def run_all(llm: ScriptedLLM, url: str, team: Path, run_ids: list[str], tmp: Path) -> float:
    """Start every run at once; wall seconds until the last exits (a failed run is a figure,
    not an error: without the limiter, tasks may fail once their retries run out)."""
    started = time.perf_counter()
    procs = [
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
            stdout=(tmp / f"{run_id}.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        for run_id in run_ids
    ]
    for proc in procs:
        proc.wait(timeout=1800)
    return time.perf_counter() - started


def boards(conn: redis.Redis, run_ids: list[str]) -> list[TaskState]:
    return [s for run_id in run_ids for s in TaskBoard(conn, RunKeys(run_id)).snapshot()]


@dataclass
class Goodput:
    served_per_s: float
    refused_share: float
    completed: int
    planned: int


def goodput(llm: ScriptedLLM, url: str, tmp: Path, sizes: Sizes, tag: str, queue: str) -> Goodput:
    """The runs against a fresh rate-limited member model; what the provider saw."""
    provider = RateLimitedProvider(
        rps=sizes.rps, burst=sizes.rps, headers=frozenset({"retry-after", "openai"})
    )
    member = f"limited-{tag}"
    llm.script(member, handler=provider.handler)
    team = write_team(tmp / f"team-{tag}.toml", llm, tag, member, sizes.tasks, sizes.workers, queue)
    run_ids = [f"{tag}{n}" for n in range(sizes.runs)]
    run_all(llm, url, team, run_ids, tmp)
    states = boards(redis.Redis.from_url(url, decode_responses=True), run_ids)
    times = provider.served_times
    span_s = times[-1] - times[0] if len(times) > 1 else 0.0
    total = provider.served + provider.refused
    return Goodput(
        served_per_s=(len(times) - 1) / span_s if span_s else 0.0,
        refused_share=provider.refused / total if total else 0.0,
        completed=sum(s.status is TaskStatus.COMPLETED for s in states),
        planned=sizes.runs * sizes.tasks,
    )


def per_task_ms(llm: ScriptedLLM, url: str, tmp: Path, sizes: Sizes, tag: str, queue: str) -> float:
    """One run of zero-latency tasks on an unlimited model: ms per task, first start to last
    end on the board."""
    member = f"free-{tag}"
    llm.script(member, ["done"], repeat_last=True)
    team = write_team(
        tmp / f"team-{tag}.toml", llm, tag, member, sizes.free_tasks, sizes.workers, queue
    )
    run_all(llm, url, team, [tag], tmp)
    states = boards(redis.Redis.from_url(url, decode_responses=True), [tag])
    span_ms = max(s.end_ms for s in states) - min(s.start_ms for s in states)
    return span_ms / len(states)


def run(sizes: Sizes) -> list[BenchFigure]:
    llm = ScriptedLLM()
    llm.start()
    results: dict[str, Goodput] = {}
    overhead: dict[str, list[float]] = {"on": [], "off": []}
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-limits-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
        ):
            tmp = Path(tmp_dir)
            with ExitStack() as fleets:
                # Both fleets at once, each on its own queue, so the overhead passes alternate
                # (a loaded machine's drift falls on both alike).
                for mode, env in MODES.items():
                    (tmp / mode).mkdir()
                    fleets.enter_context(
                        fleet(
                            url, sizes.workers, f"lim-{mode}", tmp / mode, env, sizes.fork_workers
                        )
                    )
                for mode in MODES:
                    results[mode] = goodput(llm, url, tmp, sizes, f"good{mode}", f"lim-{mode}")
                for n in range(sizes.rounds):
                    for mode in MODES:
                        overhead[mode].append(
                            per_task_ms(llm, url, tmp, sizes, f"free{mode}{n}", f"lim-{mode}")
                        )
    finally:
        llm.stop()
    on, off = results["on"], results["off"]
    with_ms, without_ms = _median(overhead["on"]), _median(overhead["off"])
    label = (
        f"{sizes.runs} runs x {sizes.tasks} tasks, {sizes.workers} workers, provider "
        f"{sizes.rps:g} req/s"
    )
    return [
        BenchFigure(
            name=f"served req/s, limiter on ({label})",
            value=on.served_per_s,
            unit="req/s",
            baseline=sizes.rps,
            baseline_name="R",
            goal=f">= {GOODPUT_GOAL} R",
            met=on.served_per_s >= GOODPUT_GOAL * sizes.rps,
            note="first to last served member request",
        ),
        BenchFigure(
            name="refused (429), limiter on",
            value=100 * on.refused_share,
            unit="%",
            baseline=100 * off.refused_share,
            baseline_name="limiter off",
            goal=f"<= {100 * REFUSED_GOAL:g} %",
            met=on.refused_share <= REFUSED_GOAL,
        ),
        BenchFigure(
            name="tasks completed, limiter on",
            value=on.completed,
            unit="tasks",
            baseline=off.completed,
            baseline_name="limiter off",
            goal="all",
            met=on.completed == on.planned,
            note=f"{on.planned} planned",
        ),
        BenchFigure(
            name="served req/s, limiter off",
            value=off.served_per_s,
            unit="req/s",
            baseline=sizes.rps,
            baseline_name="R",
            note="each worker backs off alone",
        ),
        BenchFigure(
            name=f"time per task, no limit ({sizes.free_tasks} tasks)",
            value=with_ms,
            unit="ms",
            baseline=without_ms,
            baseline_name="limiter off",
            goal=f"ratio <= {OVERHEAD_GOAL}",
            met=with_ms <= OVERHEAD_GOAL * without_ms,
            note=f"median of {sizes.rounds} runs each, first start to last end",
        ),
    ]


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rps", type=float, default=FULL.rps)
    parser.add_argument("--runs", type=int, default=FULL.runs)
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    parser.add_argument("--free-tasks", type=int, default=FULL.free_tasks)
    args = parser.parse_args(argv)
    return print_figures(
        run(
            Sizes(
                rps=args.rps,
                runs=args.runs,
                tasks=args.tasks,
                workers=args.workers,
                free_tasks=args.free_tasks,
                rounds=FULL.rounds,
            )
        )
    )


if __name__ == "__main__":
    sys.exit(main())
