"""Planned run at scale: one `teamctl run` of a wide DAG of `--tasks` zero-latency tasks on
`--workers` preloaded workers.

Figures: plan to first dispatch (the planner's reply to the first task claimed), `teamctl status`
and `teamctl tasks` on the run mid-way and once it ended (goal < 1 s each, the real CLI against
that Redis, beside `teamctl --help` as the floor every command pays), the coordinator's CPU per
task, and the slowest script SLOWLOG recorded in each scenario (goal: none over 5 ms).

Run: .venv/bin/python -m bench.bench_planned_run [--tasks N] [--width W] [--workers K]
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.task_records import TaskStatus

from bench import failed, slowlog
from bench.bench_startup import teamctl
from bench.bench_worker import wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

GOAL_CLI_S = 1.0
RUN_TIMEOUT_S = 1800.0
RUN_ID = "planned"


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    width: int
    """Tasks per layer: task i depends on tasks i - width and i - width + 1 of the layer
    before."""
    workers: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(tasks=5000, width=1000, workers=8)
SMOKE = Sizes(tasks=20, width=10, workers=1, fork_workers=True)


def wide_dag(tasks: int, width: int) -> list[dict[str, object]]:
    """Layers of `width` tasks, each depending on two tasks of the layer before."""
    plan: list[dict[str, object]] = []
    for i in range(tasks):
        deps = sorted({f"t{d}" for d in (i - width, i - width + 1) if 0 <= d < i - i % width})
        plan.append({"id": f"t{i}", "memberId": "m1", "task": f"step {i}", "dependsOn": deps})
    return plan


def write_team(path: Path, llm: ScriptedLLM, plan: list[dict[str, object]], workers: int) -> Path:
    path.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script("plan", [json.dumps({"tasks": plan})])}" }}',
                f'synthesizer = {{ model = "{llm.script("synth", ["final"])}" }}',
                f'model = "{llm.script("member", ["done"], repeat_last=True)}"',
                "[[members]]",
                'id = "m1"',
                "[options]",
                f"max_concurrency = {2 * workers}",
                "max_rounds = 10000",
                "dependency_output_chars = 0",
            ]
        )
        + "\n"
    )
    return path


def cli_s(url: str, *args: str) -> tuple[float, float]:
    """(wall, CPU) seconds of one real `teamctl` command against the benchmark's Redis (CPU
    tells its own cost apart from waiting for a core on a loaded machine)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*teamctl(), *args, *(["--redis-url", url] if args[0] != "--help" else [])],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, wait_status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(wait_status)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise RuntimeError(
            f"teamctl {' '.join(args)} exited {proc.returncode}: {err.decode()[-500:]}"
        )
    return elapsed, usage.ru_utime + usage.ru_stime


def wait_running(
    proc: subprocess.Popen[bytes], predicate: Callable[[], object], what: str, log_path: Path
) -> None:
    """Wait for `predicate`, failing at once if the run ended first."""
    wait_for_flag(lambda: predicate() or proc.poll() is not None, what)
    if not predicate():
        raise failed(f"teamctl run exited {proc.returncode} before {what}", log_path)


def board_progress(conn: redis.Redis) -> dict[TaskStatus, int]:
    return TaskBoard(conn, RunKeys(RUN_ID)).counts()


def first_claim_ms(conn: redis.Redis) -> int:
    """When the first task was claimed (the board's start_ms, Redis clock)."""
    states = TaskBoard(conn, RunKeys(RUN_ID)).snapshot()
    return min(s.start_ms for s in states if s.start_ms)


def redis_ms(conn: redis.Redis) -> int:
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


class Measured:
    """What one run produced, figure by figure."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}
        self.slow: dict[str, slowlog.Slowest] = {}


def run_once(
    llm: ScriptedLLM, url: str, tmp: Path, tasks: int, width: int, workers: int
) -> Measured:
    out = Measured()
    conn = redis.Redis.from_url(url, decode_responses=True)
    team = write_team(tmp / "team.toml", llm, wide_dag(tasks, width), workers)
    out.values["help"] = min(cli_s(url, "--help")[0] for _ in range(3))
    slowlog.watch(conn)
    log = (tmp / "run.log").open("wb")
    proc = subprocess.Popen(
        [
            *teamctl(),
            "run",
            "A wide plan",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            url,
            "--workers",
            "0",
            "--run-id",
            RUN_ID,
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        wait_running(proc, lambda: llm.prompts("plan"), "the planner's request", tmp / "run.log")
        planned_ms = redis_ms(conn)
        wait_running(
            proc,
            lambda: board_progress(conn).get(TaskStatus.COMPLETED, 0) > 0,
            "a first task",
            tmp / "run.log",
        )
        out.values["first_dispatch_s"] = (first_claim_ms(conn) - planned_ms) / 1000
        out.slow["plan and dispatch"] = slowlog.slowest(conn)
        wait_running(
            proc,
            lambda: board_progress(conn).get(TaskStatus.COMPLETED, 0) >= tasks // 2,
            "half the tasks",
            tmp / "run.log",
        )
        out.values["status_mid_s"], out.values["status_mid_cpu_s"] = cli_s(url, "status", RUN_ID)
        out.slow["status mid-run"] = slowlog.slowest(conn)
        out.values["tasks_mid_s"], out.values["tasks_mid_cpu_s"] = cli_s(url, "tasks", RUN_ID)
        out.slow["tasks mid-run"] = slowlog.slowest(conn)
        _, wait_status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(wait_status)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
        log.close()
    if proc.returncode != 0:
        raise failed(f"teamctl run exited {proc.returncode}", tmp / "run.log")
    out.slow["the rest of the run"] = slowlog.slowest(conn)
    out.values["cpu_s"] = usage.ru_utime + usage.ru_stime
    counts = board_progress(conn)
    if counts.get(TaskStatus.COMPLETED, 0) != tasks:
        raise RuntimeError(f"not every task completed: {counts}")
    out.values["status_end_s"], out.values["status_end_cpu_s"] = cli_s(url, "status", RUN_ID)
    out.slow["status, run ended"] = slowlog.slowest(conn)
    out.values["tasks_end_s"], out.values["tasks_end_cpu_s"] = cli_s(url, "tasks", RUN_ID)
    out.slow["tasks, run ended"] = slowlog.slowest(conn)
    out.values.update(board_read_ms(conn))
    return out


WHOLE_BOARD_SCRIPT = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
"""
"""The board read before pages: every task hash in one script call."""


def board_read_ms(conn: redis.Redis) -> dict[str, float]:
    """The board read both ways on the ended run: the longest script call of a paged snapshot
    and its whole wall time, against one script call over every task hash (the read before
    pages, registered here as it was)."""
    board = TaskBoard(conn, RunKeys(RUN_ID))
    keys = [board.keys.task(t) for t in board.task_ids()]
    conn.config_set("slowlog-log-slower-than", 0)
    try:
        conn.slowlog_reset()
        started = time.perf_counter()
        board.snapshot()
        paged_wall = time.perf_counter() - started
        paged = conn.slowlog_get(slowlog.ENTRIES)
        conn.slowlog_reset()
        started = time.perf_counter()
        conn.register_script(WHOLE_BOARD_SCRIPT)(keys=keys)
        whole_wall = time.perf_counter() - started
        whole = conn.slowlog_get(slowlog.ENTRIES)
    finally:
        slowlog.watch(conn)
    longest = [
        max((e["duration"] for e in entries if str(e["command"]).find("EVALSHA") >= 0), default=0)
        / 1000
        for entries in (paged, whole)
    ]
    return {
        "paged_script": longest[0],
        "paged_wall": paged_wall * 1000,
        "whole_script": longest[1],
        "whole_wall": whole_wall * 1000,
    }


def collect(sizes: Sizes) -> Measured:
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-planned-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
            worker_fleet(url, sizes.workers, Path(tmp_dir), forked=sizes.fork_workers),
        ):
            return run_once(llm, url, Path(tmp_dir), sizes.tasks, sizes.width, sizes.workers)
    finally:
        llm.stop()


def run(sizes: Sizes) -> list[BenchFigure]:
    tasks, width, workers = sizes.tasks, sizes.width, sizes.workers
    data = collect(sizes)
    v, floor = data.values, data.values["help"]
    label = f"{tasks} tasks, {tasks // width} layers of {width}, {workers} workers"
    rows = [
        BenchFigure(
            name=f"plan to first dispatch ({label})",
            value=v["first_dispatch_s"],
            unit="s",
            note="planner's reply to the first claim",
        )
    ]
    for key, what in (
        ("status_mid_s", "`teamctl status`, mid-run"),
        ("tasks_mid_s", "`teamctl tasks`, mid-run"),
        ("status_end_s", "`teamctl status`, run ended"),
        ("tasks_end_s", "`teamctl tasks`, run ended"),
    ):
        rows.append(
            BenchFigure(
                name=what,
                value=v[key],
                unit="s",
                baseline=floor,
                baseline_name="`teamctl --help`",
                goal=f"< {GOAL_CLI_S:.0f} s",
                met=v[key] < GOAL_CLI_S,
                note=f"{v[key.replace('_s', '_cpu_s')]:.2f} s CPU",
            )
        )
    rows += [
        BenchFigure(
            name="board read: longest script call (paged snapshot)",
            value=v["paged_script"],
            unit="ms",
            baseline=v["whole_script"],
            baseline_name="one snapshot.lua over every task",
            goal="<= 5 ms",
            met=v["paged_script"] <= slowlog.SLOW_US / 1000,
            note="SLOWLOG at threshold 0, the ended board",
        ),
        BenchFigure(
            name="board read: whole snapshot, wall",
            value=v["paged_wall"],
            unit="ms",
            baseline=v["whole_wall"],
            baseline_name="one snapshot.lua call, parse excluded",
            note="pages of 32 tasks, parsed",
        ),
    ]
    rows.append(
        BenchFigure(
            name="coordinator CPU per task",
            value=v["cpu_s"] / tasks * 1000,
            unit="ms",
            note="whole `teamctl run`, planning and synthesis included",
        )
    )
    for scenario, worst in data.slow.items():
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
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    parser.add_argument("--width", type=int, default=FULL.width)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    args = parser.parse_args(argv)
    return print_figures(run(Sizes(tasks=args.tasks, width=args.width, workers=args.workers)))


if __name__ == "__main__":
    sys.exit(main())
