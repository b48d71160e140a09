"""Reclaim benchmark: 10 times (FULL), a one-task run's worker (and its job process)
is SIGKILLed while the task's model call is in flight, at heartbeat_ttl_s 3; the coordinator
reclaims the task once its claim expires and another worker completes it.

Figures: kill to completion by the other worker (goal <= TTL + 2 s), tasks lost and double
completions (goal 0). The killed worker is replaced before the next run, so two always listen.

Run: .venv/bin/python -m bench.bench_reclaim
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis

from bench.bench_startup import RUN_TIMEOUT_S, teamctl
from bench.bench_worker import QUEUE, wait_for_flag, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

TTL_S = 3.0
GOAL_S = TTL_S + 2.0
PLAN = {"tasks": [{"id": "work", "memberId": "m1", "task": "Do the work"}]}


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    kills: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(kills=10)
SMOKE = Sizes(kills=1, fork_workers=True)


class FirstCallHangs:
    """The member's model: the first call waits until released (the worker dies meanwhile),
    later calls answer at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls == 1:
            self.release.wait(30)
            return "late answer"
        return "rescued answer"


def holder_pids(board: TaskBoard) -> tuple[int, int]:
    """The job process holding the claim, and its rq worker (its parent)."""
    task = board.get("work")
    assert task is not None, "the run's one task is on its board"
    horse = int((task.worker or "").rsplit(":", 1)[1])
    parent = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return horse, parent


def one_kill(llm: ScriptedLLM, url: str, tmp: Path, n: int) -> tuple[float | None, int]:
    """(seconds from the kill to the task's completion, or None if it never completed;
    completed events of the task) for one run."""
    run_id = f"reclaim{n}"
    member = FirstCallHangs()
    team = tmp / f"{run_id}.toml"
    team.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script(f"plan-{run_id}", [json.dumps(PLAN)])}" }}',
                f'synthesizer = {{ model = "{llm.script(f"synth-{run_id}", ["final"])}" }}',
                "[[members]]",
                'id = "m1"',
                f'model = "{llm.script(f"m1-{run_id}", handler=member)}"',
                "[options]",
                f"heartbeat_ttl_s = {TTL_S}",
            ]
        )
        + "\n"
    )
    conn = redis.Redis.from_url(url, decode_responses=True)
    board = TaskBoard(conn, RunKeys(run_id))
    with (tmp / f"{run_id}.log").open("wb") as log:
        run = subprocess.Popen(
            [
                *teamctl(),
                "run",
                "Survive a crash",
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
    try:
        wait_for_flag(lambda: member.calls >= 1, "the first model call")
        horse, parent = holder_pids(board)
        killed_ms = time.time() * 1000
        os.kill(parent, signal.SIGKILL)
        os.kill(horse, signal.SIGKILL)
    finally:
        member.release.set()
    run.wait(RUN_TIMEOUT_S)
    task = board.get("work")
    assert task is not None, "the run's one task is on its board"
    completed = sum(
        1
        for _id, f in conn.xrange(board.keys.events)
        if f.get("task_id") == "work" and f.get("status") == "completed"
    )
    if task.status.value != "completed":
        return None, completed
    return (task.end_ms - killed_ms) / 1000, completed


def live_workers(conn: redis.Redis) -> int:
    """Registered workers whose process is alive: RQ drops a SIGKILLed one from its registry
    only when it notices."""
    pids = [conn.hget(key, "pid") for key in conn.smembers(f"rq:workers:{QUEUE}")]
    return sum(1 for pid in pids if pid and _alive(int(pid)))


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a killed child of ours stays one until reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def collect(sizes: Sizes) -> tuple[list[float | None], list[int]]:
    """Per kill: seconds to completion elsewhere (None: lost), and completed events."""
    llm = ScriptedLLM()
    llm.start()
    times: list[float | None] = []
    events: list[int] = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmp_dir,
            throwaway_redis() as url,
            ExitStack() as stack,
        ):
            tmp = Path(tmp_dir)
            rq_conn = redis.Redis.from_url(url)

            def start_worker(n: int) -> None:
                stack.enter_context(
                    worker(
                        worker_command(url, [QUEUE]),
                        tmp / f"w{n}.log",
                        url,
                        forked=sizes.fork_workers,
                    )
                )

            for n in range(2):
                start_worker(n)
            for n in range(sizes.kills):
                if n:  # the worker killed before this run is replaced
                    start_worker(n + 1)
                wait_for_flag(lambda: live_workers(rq_conn) >= 2, "2 live workers")
                seconds, completed = one_kill(llm, url, tmp, n)
                times.append(seconds)
                events.append(completed)
    finally:
        llm.stop()
    return times, events


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: kill-to-completion against TTL + 2 s; lost tasks; double completions
    (the default sizes, or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    times, events = collect(sizes)
    done = [t for t in times if t is not None]
    lost = len(times) - len(done)
    doubles = sum(1 for e in events if e > 1)
    rows = []
    if done:
        rows += [
            BenchFigure(
                name="SIGKILL mid-task -> completed by another worker, median",
                value=statistics.median(done),
                unit="s",
                baseline=TTL_S,
                baseline_name="heartbeat_ttl_s",
                goal=f"<= {GOAL_S:.0f} s",
                met=statistics.median(done) <= GOAL_S,
                note=f"{sizes.kills} kills",
            ),
            BenchFigure(
                name="SIGKILL mid-task -> completed, worst",
                value=max(done),
                unit="s",
                baseline=TTL_S,
                baseline_name="heartbeat_ttl_s",
                goal=f"<= {GOAL_S:.0f} s",
                met=max(done) <= GOAL_S,
            ),
        ]
    rows += [
        BenchFigure(name="tasks lost", value=lost, unit="tasks", goal="0", met=lost == 0),
        BenchFigure(
            name="double completions", value=doubles, unit="tasks", goal="0", met=doubles == 0
        ),
    ]
    return rows


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
