"""MCP benchmark: what a member's stdio MCP server costs each attempt. One preloaded forking worker
(the documented `rq worker -c teamctl.worker.settings`) runs paced run_task jobs, one at a time,
of a member without MCP and of a member with `mcp-server-time` (started in the workspace, its
tools listed, offered, and stopped with the attempt); the zero-latency scripted model answers at
once, so the difference is the server's start, listing and stop. In-process timings of the same
steps (McpHub.start and close) split that cost.

Run: .venv/bin/python -m bench.bench_mcp
It starts its own redis-server, model server and worker, and stops each by its pid.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from rq import Queue
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts
from teamctl.shared.board import TaskBoard
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member

from bench.bench_worker import QUEUE, per_task_ms, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

PACE_S = 0.1
TIME_SERVER = McpServer(name="time", command=["mcp-server-time"])
TIMEOUTS = McpTimeouts(start_s=60, list_s=60, call_s=60)


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    jobs: int
    """Paced run_task jobs of each kind (an MCP attempt takes about a second)."""
    in_process_rounds: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(jobs=10, in_process_rounds=5)
SMOKE = Sizes(jobs=1, in_process_rounds=1, fork_workers=True)


def make_run(
    conn: redis.Redis,
    run_id: str,
    model: str,
    api_base: str,
    workspace: Path,
    with_mcp: bool,
    jobs: int,
) -> None:
    """A run of `jobs` tasks and a warm-up one for one member, with mcp-server-time or without
    MCP."""
    member = Member(
        id="m1",
        model=model,
        mcp=["time"] if with_mcp else [],
        mcp_servers=[TIME_SERVER] if with_mcp else [],
    )
    spec = RunSpec(
        run_id=run_id,
        team_id="bench",
        objective="benchmark MCP",
        members=[member],
        options=RunOptions(),
        models=ModelChoice(
            planner=model, synthesizer=model, member_default=model, api_base=api_base
        ),
        workspace_dir=str(workspace),
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(
        [TaskSpec(id=f"t{n}", member_id="m1", task=f"task {n}") for n in range(jobs + 1)]
    )


def paced_run_task_ms(
    url: str, llm: ScriptedLLM, model: str, with_mcp: bool, jobs: int
) -> list[float]:
    """Enqueue-to-finished ms of each paced run_task job (after one unmeasured warm-up job)."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
    run_id = f"bench-mcp-{'on' if with_mcp else 'off'}-{os.getpid()}"
    with tempfile.TemporaryDirectory() as workspace:
        make_run(conn, run_id, model, llm.api_base, Path(workspace), with_mcp, jobs)
        per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, "t0"))])
        times = []
        for n in range(1, jobs + 1):
            time.sleep(PACE_S)  # pacing, not synchronization: the worker sits idle meanwhile
            times.append(per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, f"t{n}"))]))
        done = [t.status.value for t in TaskBoard(conn, RunKeys(run_id)).snapshot()]
        if done.count("completed") != jobs + 1:
            raise RuntimeError(f"tasks not all completed: {done}")
    return times


def in_process_ms(rounds: int) -> tuple[float, float]:
    """Median ms of McpHub.start (spawn, handshake, list) and of close (stop) of the server."""
    starts, closes = [], []
    with tempfile.TemporaryDirectory() as workspace:
        for _ in range(rounds):
            hub = McpHub(Path(workspace), TIMEOUTS)
            began = time.perf_counter()
            hub.start(TIME_SERVER)
            started = time.perf_counter()
            hub.close()
            starts.append((started - began) * 1000)
            closes.append((time.perf_counter() - started) * 1000)
    return statistics.median(starts), statistics.median(closes)


def figures(smoke: bool = False) -> list[BenchFigure]:
    """Per-attempt time with mcp-server-time against without MCP; the in-process split (the
    default sizes, or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    llm = ScriptedLLM()
    llm.start()
    model = llm.script("bench-mcp-member", ["done"], repeat_last=True)
    try:
        with (
            throwaway_redis() as url,
            tempfile.TemporaryDirectory() as logs,
            worker(
                worker_command(url, [QUEUE]),
                Path(logs) / "worker.log",
                url,
                forked=sizes.fork_workers,
            ),
        ):
            without = paced_run_task_ms(url, llm, model, with_mcp=False, jobs=sizes.jobs)
            with_mcp = paced_run_task_ms(url, llm, model, with_mcp=True, jobs=sizes.jobs)
    finally:
        llm.stop()
    start_ms, close_ms = in_process_ms(sizes.in_process_rounds)
    base, mcp = statistics.median(without), statistics.median(with_mcp)
    return [
        BenchFigure(
            name="run_task, member with mcp-server-time",
            value=mcp,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=f"median of {sizes.jobs} paced jobs each, preloaded forking worker",
        ),
        BenchFigure(
            name="added per attempt by one stdio MCP server",
            value=mcp - base,
            unit="ms",
            note="start, handshake, tools/list, stop",
        ),
        BenchFigure(
            name="McpHub.start of mcp-server-time (spawn, handshake, list)",
            value=start_ms,
            unit="ms",
            note=f"in-process, median of {sizes.in_process_rounds}",
        ),
        BenchFigure(
            name="McpHub.close of mcp-server-time (stop its process group)",
            value=close_ms,
            unit="ms",
            note=f"in-process, median of {sizes.in_process_rounds}",
        ),
    ]


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
