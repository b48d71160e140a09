"""MCP benchmark: what a member's stdio MCP server costs each attempt. One preloaded forking worker
(the documented `rq worker -c teamctl.worker.settings`) runs paced run_task jobs, one at a time,
of a member without MCP and of members with `mcp-server-time`: the attempts of one run after its
first (the worker's MCP keeper kept the session warm: worker/mcp_warm), with the run's workspace
on disk and kept in Redis (copied by each attempt), the first attempt of
fresh runs (the server starts, lists its tools, and stays), attempts whose server was killed just
before (started again), and, where `npx` and `uvx` exist, a tiny npm package started with `npx`
from its tarball and a tiny Python package started with `uvx` from its wheel (each: an empty
package cache, then another run's first attempt with the worker's cache, then a warm attempt).
The zero-latency scripted model answers at once, so the differences are the servers'.
In-process timings (McpHub.start and close) split a start's cost.

Run: .venv/bin/python -m bench.bench_mcp
It starts its own redis-server, model server and worker, and stops each by its pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
from teamctl.shared.workspace.caps import WorkspaceStore

from bench.bench_worker import QUEUE, per_task_ms, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM
from tests.support.mcp import processes_in, tiny_uv_wheel

PACE_S = 0.1
TIME_SERVER = McpServer(name="time", command=["mcp-server-time"])
TIMEOUTS = McpTimeouts(start_s=60, list_s=60, call_s=60)
WARM_GOAL_MS = 50.0
"""What a warm session may add to an attempt, against a member without MCP."""
TINY_NPM = Path(__file__).resolve().parents[1] / "tests" / "mcp_fixture" / "tiny_npm"


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    jobs: int
    """Paced run_task jobs of each kind (a server's start takes about a second)."""
    warm_jobs: int
    """Paced jobs of each run when a warm session is set against no MCP (~0.1 s each)."""
    in_process_rounds: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(jobs=10, warm_jobs=30, in_process_rounds=5)
SMOKE = Sizes(jobs=1, warm_jobs=1, in_process_rounds=1, fork_workers=True)


def make_run(
    conn: redis.Redis,
    run_id: str,
    model: str,
    api_base: str,
    workspace: Path,
    server: McpServer | None,
    tasks: int,
    store: WorkspaceStore = "local",
) -> None:
    """A run of `tasks` tasks (t0, t1, ...) for one member, with `server` or without MCP, its
    workspace kept in `store`."""
    member = Member(
        id="m1",
        model=model,
        mcp=[server.name] if server else [],
        mcp_servers=[server] if server else [],
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
        workspace_store=store,
        created_ms=now_ms(),
    )
    RunStore(conn, RunKeys(run_id)).create(spec)
    TaskBoard(conn, RunKeys(run_id)).create(
        [TaskSpec(id=f"t{n}", member_id="m1", task=f"task {n}") for n in range(tasks)]
    )


class Bench:
    """The worker's queue and what a measurement needs to make runs for it."""

    def __init__(self, url: str, llm: ScriptedLLM, model: str) -> None:
        self.conn = redis.Redis.from_url(url, decode_responses=True)
        self.queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
        self.llm = llm
        self.model = model
        self.runs = 0

    @contextmanager
    def run(
        self, server: McpServer | None, tasks: int, store: WorkspaceStore = "local"
    ) -> Iterator[tuple[str, Path]]:
        """A fresh run of `tasks` tasks in a workspace of its own (kept in `store`); ended when
        the block ends (the worker's keeper then stops its server)."""
        self.runs += 1
        run_id = f"bench-mcp-{os.getpid()}-{self.runs}"
        with tempfile.TemporaryDirectory() as workspace:
            make_run(
                self.conn,
                run_id,
                self.model,
                self.llm.api_base,
                Path(workspace),
                server,
                tasks,
                store,
            )
            try:
                yield run_id, Path(workspace).resolve()
            finally:
                self.conn.hset(RunKeys(run_id).state, "status", "completed")
                deadline = time.monotonic() + 30
                while processes_in(Path(workspace).resolve()) and time.monotonic() < deadline:
                    time.sleep(0.05)  # the keeper's sweep stops the ended run's server

    def attempt_ms(self, run_id: str, task: str) -> float:
        """Enqueue-to-finished ms of one paced run_task job, which must complete its task."""
        time.sleep(PACE_S)  # pacing, not synchronization: the worker sits idle meanwhile
        took = per_task_ms(self.queue, [("teamctl.worker.jobs.run_task", (run_id, task))])
        status = TaskBoard(self.conn, RunKeys(run_id)).get(task)
        if status is None or status.status.value != "completed":
            raise RuntimeError(f"{task} of {run_id} did not complete: {status}")
        return took

    def same_run_ms(self, server: McpServer | None, jobs: int) -> list[float]:
        """Attempts 2..jobs+1 of one run (its first, unmeasured, starts any server)."""
        with self.run(server, jobs + 1) as (run_id, _):
            self.attempt_ms(run_id, "t0")
            return [self.attempt_ms(run_id, f"t{n}") for n in range(1, jobs + 1)]

    def interleaved_ms(
        self, server: McpServer, jobs: int, store: WorkspaceStore = "local"
    ) -> tuple[list[float], list[float]]:
        """Attempts 2..jobs+1 of a run without MCP and of one with `server`, alternating (a
        shared machine's load then weighs on both alike), workspaces kept in `store`:
        (without, with)."""
        with (
            self.run(None, jobs + 1, store) as (plain, _),
            self.run(server, jobs + 1, store) as (warm, _),
        ):
            self.attempt_ms(plain, "t0")
            self.attempt_ms(warm, "t0")
            without, with_server = [], []
            for n in range(1, jobs + 1):
                without.append(self.attempt_ms(plain, f"t{n}"))
                with_server.append(self.attempt_ms(warm, f"t{n}"))
            return without, with_server

    def first_use_ms(self, server: McpServer, jobs: int) -> list[float]:
        """The first attempt of `jobs` fresh runs: each starts the server."""
        times = []
        for _ in range(jobs):
            with self.run(server, 1) as (run_id, _):
                times.append(self.attempt_ms(run_id, "t0"))
        return times

    def after_a_kill_ms(self, server: McpServer, jobs: int) -> list[float]:
        """Attempts whose run's warm server was SIGKILLed just before: started again."""
        times = []
        with self.run(server, jobs + 1) as (run_id, workspace):
            self.attempt_ms(run_id, "t0")
            for n in range(1, jobs + 1):
                for pid in processes_in(workspace):
                    os.kill(pid, signal.SIGKILL)
                times.append(self.attempt_ms(run_id, f"t{n}"))
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


def packed_tiny_server(directory: Path) -> McpServer:
    """The tiny npm package of tests/mcp_fixture, packed into `directory` and started with
    `npx` from its tarball (npm_config_offline: the network is never asked)."""
    subprocess.run(
        ["npm", "pack", "--pack-destination", str(directory)],
        cwd=TINY_NPM,
        check=True,
        capture_output=True,
        env={**os.environ, "npm_config_cache": str(directory / "pack-cache")},
    )
    (tarball,) = directory.glob("tiny-mcp-*.tgz")
    return McpServer(
        name="tiny",
        command=["npx", "-y", "--package", str(tarball), "tiny-mcp"],
        env={"npm_config_offline": "true", "npm_config_update_notifier": "false"},
    )


def uvx_server(directory: Path) -> McpServer | None:
    """The tiny Python package of tests/mcp_fixture, built into a wheel in `directory` and
    started with `uvx` from it (--offline: the network is never asked); None without uv."""
    uvx = shutil.which("uvx", path=str(Path(sys.executable).parent))
    if uvx is None:
        return None
    wheel = tiny_uv_wheel(directory)
    return McpServer(
        name="tiny",
        command=[uvx, "--offline", "--python", sys.executable, "--from", str(wheel), "tiny-mcp-py"],
    )


def package_figures(
    bench: Bench, base: float, launcher: str, server: McpServer, installs: str
) -> list[BenchFigure]:
    """A server `launcher` (npx, uvx) installs: its first start (the worker's cache empty),
    another run's first attempt (installed from the cache), and a warm attempt."""
    (empty_cache,) = bench.first_use_ms(server, 1)
    cached = statistics.median(bench.first_use_ms(server, 3))
    warm = statistics.median(bench.same_run_ms(server, 3))
    return [
        BenchFigure(
            name=f"run_task, {launcher} server, first start (empty package cache)",
            value=empty_cache,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=installs,
        ),
        BenchFigure(
            name=f"run_task, {launcher} server, another run's first attempt (cached)",
            value=cached,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=f"median of 3 runs: {launcher} runs what the cache installed",
        ),
        BenchFigure(
            name=f"run_task, {launcher} server, the run's next attempt (warm)",
            value=warm,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note="median of 3",
        ),
    ]


def launcher_figures(bench: Bench, base: float, directory: Path) -> list[BenchFigure]:
    """package_figures of an npx server and of a uvx server, of those this machine has."""
    found = []
    if shutil.which("npx") is not None:
        npm = directory / "npm"
        npm.mkdir()
        found += package_figures(
            bench,
            base,
            "npx",
            packed_tiny_server(npm),
            "npm installs the package from its tarball into the worker's cache",
        )
    uv = directory / "uv"
    uv.mkdir()
    if (server := uvx_server(uv)) is not None:
        found += package_figures(
            bench,
            base,
            "uvx",
            server,
            "uv installs the wheel into an environment in the worker's cache",
        )
    return found


def added_by_warm_session(where: str, added_ms: float, note: str) -> BenchFigure:
    """What a warm session adds to an attempt (`where`: how the run keeps its workspace),
    against the goal."""
    return BenchFigure(
        name=f"added per attempt by a warm stdio MCP session{where}",
        value=added_ms,
        unit="ms",
        goal=f"<= {WARM_GOAL_MS:g} ms",
        met=added_ms <= WARM_GOAL_MS,
        note=note,
    )


def figures(smoke: bool = False) -> list[BenchFigure]:
    """Per-attempt time with mcp-server-time (warm, first use, killed) and npx and uvx servers
    against without MCP; the in-process split (the default sizes, or the smoke pass's)."""
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
            bench = Bench(url, llm, model)
            plain, warm_runs = bench.interleaved_ms(TIME_SERVER, sizes.warm_jobs)
            base, warm = statistics.median(plain), statistics.median(warm_runs)
            plain_kept, warm_kept = bench.interleaved_ms(TIME_SERVER, sizes.warm_jobs, "redis")
            base_kept, warm_in_copy = statistics.median(plain_kept), statistics.median(warm_kept)
            first = statistics.median(bench.first_use_ms(TIME_SERVER, sizes.jobs))
            killed = statistics.median(bench.after_a_kill_ms(TIME_SERVER, sizes.jobs))
            launched = launcher_figures(bench, base, Path(logs))
    finally:
        llm.stop()
    start_ms, close_ms = in_process_ms(sizes.in_process_rounds)
    paced = f"median of {sizes.jobs} paced jobs"
    return [
        BenchFigure(
            name="run_task, mcp-server-time, the run's next attempt (warm)",
            value=warm,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=f"median of {sizes.warm_jobs} paced jobs alternating with the baseline's",
        ),
        added_by_warm_session(
            "", warm - base, "open in the worker's keeper, tools listed at the start"
        ),
        added_by_warm_session(
            ", workspace kept in Redis",
            warm_in_copy - base_kept,
            f"{warm_in_copy:.1f} against {base_kept:.1f} ms without MCP, medians of "
            f"{sizes.warm_jobs} paced jobs each, alternating: the attempt's copy of the "
            "workspace is fetched into the worker's directory for the run",
        ),
        BenchFigure(
            name="run_task, mcp-server-time, a run's first attempt (first use)",
            value=first,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=f"{paced}, one run each: start, handshake, tools/list",
        ),
        BenchFigure(
            name="run_task, mcp-server-time killed before the attempt",
            value=killed,
            unit="ms",
            baseline=base,
            baseline_name="run_task, member without MCP",
            note=f"{paced}: the keeper sees it dead and starts it again",
        ),
        *launched,
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
