"""Makespan benchmark: a seeded random 40-task DAG whose tasks take 0.2-1.0 s of
scripted model latency each, on 4 preloaded workers (max_concurrency 4), with the coordinator's
two dispatch modes (RunOptions.dispatch): eager (a task is enqueued as soon as its dependencies
end) and barrier (the next round waits for every task of the current one).

Makespan (first task start to last task end, from the board) over its lower bound,
max(critical path, total work / 4), both from the scripted latencies. Goal: eager <= 1.08.

Run: .venv/bin/python -m bench.bench_makespan [--latency-scale 10]
`--latency-scale` multiplies every task's latency (the same DAG and draws), to show what the
fixed per-task cost weighs at real models' speed; the goal is the default scale's.
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis

from bench import failed
from bench.bench_startup import RUN_TIMEOUT_S, teamctl
from bench.bench_worker import worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

SEED = 13
MAX_DEPS = 3
GOAL_RATIO = 1.08


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    workers: int
    """Preloaded workers, and the run's max_concurrency."""
    latency_s: tuple[float, float]
    """Each task's scripted model latency is drawn from this range."""
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(tasks=40, workers=4, latency_s=(0.2, 1.0))
SMOKE = Sizes(tasks=5, workers=1, latency_s=(0.01, 0.05), fork_workers=True)


def random_dag(seed: int, sizes: Sizes) -> tuple[list[dict[str, object]], dict[str, float]]:
    """Plan tasks (each on its own member, so each has its own scripted latency) and latencies:
    task i depends on up to MAX_DEPS earlier tasks."""
    rng = random.Random(seed)
    tasks: list[dict[str, object]] = []
    latency: dict[str, float] = {}
    for i in range(sizes.tasks):
        deps = sorted(rng.sample(range(i), rng.randint(0, min(i, MAX_DEPS)))) if i else []
        tasks.append(
            {
                "id": f"t{i}",
                "memberId": f"m{i}",
                "task": f"step {i}",
                "dependsOn": [f"t{d}" for d in deps],
            }
        )
        latency[f"t{i}"] = round(rng.uniform(*sizes.latency_s), 3)
    return tasks, latency


def lower_bound_s(
    tasks: list[dict[str, object]], latency: dict[str, float], workers: int
) -> tuple[float, float]:
    """(critical path, total work / `workers`) in seconds."""
    finish: dict[str, float] = {}
    for task in tasks:  # plan order is a topological order
        deps = task["dependsOn"]
        assert isinstance(deps, list)
        finish[str(task["id"])] = (
            max((finish[d] for d in deps), default=0.0) + latency[str(task["id"])]
        )
    return max(finish.values()), sum(latency.values()) / workers


def write_team(
    path: Path,
    llm: ScriptedLLM,
    tag: str,
    dispatch: str,
    tasks: list[dict[str, object]],
    latency: dict[str, float],
    workers: int,
) -> Path:
    """A team of a member per task, member i's model answering after task i's latency."""
    planner = llm.script(f"plan-{tag}", [json.dumps({"tasks": tasks})])
    synth = llm.script(f"synth-{tag}", ["the answer"])
    lines = [
        'team_id = "bench"',
        f'planner = {{ model = "{planner}" }}',
        f'synthesizer = {{ model = "{synth}" }}',
    ]
    for i in range(len(tasks)):
        model = llm.script(f"m{i}-{tag}", ["done"], repeat_last=True, latency_s=latency[f"t{i}"])
        lines += ["[[members]]", f'id = "m{i}"', f'model = "{model}"']
    lines += [
        "[options]",
        f'dispatch = "{dispatch}"',
        f"max_concurrency = {workers}",
        "max_rounds = 1000",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def makespan_s(
    llm: ScriptedLLM,
    url: str,
    tmp: Path,
    dispatch: str,
    tasks: list[dict[str, object]],
    latency: dict[str, float],
    workers: int,
) -> float:
    """First task start to last task end of one run, read from the board."""
    tag = f"makespan-{dispatch}"
    team = write_team(tmp / f"{tag}.toml", llm, tag, dispatch, tasks, latency, workers)
    with (tmp / f"{tag}.log").open("wb") as log:
        done = subprocess.run(
            [
                *teamctl(),
                "run",
                "Do the steps",
                "--team",
                str(team),
                "--api-base",
                llm.api_base,
                "--redis-url",
                url,
                "--workers",
                "0",
                "--run-id",
                tag,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            timeout=RUN_TIMEOUT_S * max(1.0, *latency.values()),  # slower models, longer
            check=False,
        )
    if done.returncode != 0:
        raise failed(f"teamctl run {tag} exited {done.returncode}", tmp / f"{tag}.log")
    board = TaskBoard(redis.Redis.from_url(url, decode_responses=True), RunKeys(tag))
    states = board.snapshot()
    if len(states) != len(tasks) or any(s.status.value != "completed" for s in states):
        raise RuntimeError(f"{tag}: not every task completed")
    return (max(s.end_ms for s in states) - min(s.start_ms for s in states)) / 1000


def collect(sizes: Sizes) -> dict[str, float]:
    """Both modes' makespans and the two lower bounds, in seconds."""
    tasks, latency = random_dag(SEED, sizes)
    critical, work = lower_bound_s(tasks, latency, sizes.workers)
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory() as tmp_dir,
            throwaway_redis() as url,
            worker_fleet(url, sizes.workers, Path(tmp_dir), forked=sizes.fork_workers),
        ):
            tmp = Path(tmp_dir)
            spans = {
                mode: makespan_s(llm, url, tmp, mode, tasks, latency, sizes.workers)
                for mode in ("eager", "barrier")
            }
    finally:
        llm.stop()
    return {**spans, "critical": critical, "work": work}


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: each mode's makespan over the lower bound (the default sizes, or the
    smoke pass's)."""
    return makespan_figures(SMOKE if smoke else FULL)


def makespan_figures(sizes: Sizes, latency_scale: float = 1.0) -> list[BenchFigure]:
    """Each mode's makespan over the lower bound; the goal is judged at the unscaled latencies."""
    low, high = sizes.latency_s
    scaled = replace(sizes, latency_s=(low * latency_scale, high * latency_scale))
    data = collect(scaled)
    bound = max(data["critical"], data["work"])
    note = (
        f"seed {SEED}; critical path {data['critical']:.2f} s, "
        f"work/{sizes.workers} {data['work']:.2f} s"
    )
    if latency_scale != 1.0:
        note += f"; model calls {low * latency_scale:g}-{high * latency_scale:g} s"
    judged = latency_scale == 1.0
    return [
        BenchFigure(
            name=f"makespan, {mode} dispatch",
            value=data[mode],
            unit="s",
            baseline=bound,
            baseline_name="lower bound",
            goal=f"ratio <= {GOAL_RATIO}" if mode == "eager" and judged else "",
            met=data[mode] / bound <= GOAL_RATIO if mode == "eager" and judged else None,
            note=note,
        )
        for mode in ("eager", "barrier")
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        help="multiply every task's model latency (default 1: 0.2-1.0 s)",
    )
    args = parser.parse_args(argv)
    if args.latency_scale <= 0:
        parser.error("--latency-scale must be above 0")
    return print_figures(makespan_figures(FULL, args.latency_scale))


if __name__ == "__main__":
    sys.exit(main())
