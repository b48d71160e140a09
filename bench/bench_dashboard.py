"""Dashboard benchmark: the Redis commands `teamctl dashboard` adds with 50 live run pages open,
idle and per board change, measured with INFO commandstats deltas on a private redis-server.
The goal is a cost proportional to events, not to open pages or to time: idle, a page costs one
XREAD a minute (its keep-alive); a change costs its own page a few commands, whatever the number
of pages. Baselines from the same run: the board's own commands per change with no page open,
and the per-change cost with 10 pages open.

Run: .venv/bin/python -m bench.bench_dashboard [--runs 50 --changes 400 --idle-s 65]
Starts its own redis-server (appendonly off) and the dashboard under uvicorn on 127.0.0.1, in
this process; both stop when it ends. The SSE clients are httpx streams (no browser: a browser
also reloads the page body after a change, at most once a second, which is not counted here).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial

import httpx
import redis
from teamctl.shared.board import TaskBoard
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunStore
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member

from bench.figures import BenchFigure, print_figures

SETTLE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    runs: int
    """Live runs, one page open on each."""
    few: int
    """The pages open for the per-change baseline."""
    changes: int
    """Board changes per measure."""
    idle_s: float
    """The quiet window (the keep-alive XREAD comes once a minute)."""

    def __post_init__(self) -> None:
        # Changes alternate claim and release per board: an even number on each leaves every
        # board free for the next measure.
        if self.changes % (2 * self.runs) or self.changes % (2 * self.few):
            raise ValueError(
                f"changes ({self.changes}) must be a multiple of twice the runs "
                f"({self.runs}) and of twice the few pages ({self.few})"
            )


FULL = Sizes(runs=50, few=10, changes=400, idle_s=65.0)
SMOKE = Sizes(runs=3, few=2, changes=12, idle_s=1.0)


def live_run(conn: redis.Redis, run_id: str) -> TaskBoard:
    """A running run (its lease held, as a coordinator would) with one ready task `t0`."""
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective="bench",
        members=[Member(id="m1")],
        options=RunOptions(),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=now_ms(),
    )
    keys = RunKeys(run_id)
    RunStore(conn, keys).create(spec)
    lease = Lease(conn, keys, ttl_s=3600)
    assert lease.try_acquire()
    RunStore(conn, keys, lease.owner).set_status(RunStatus.RUNNING)
    board = TaskBoard(conn, keys)
    board.create([TaskSpec(id="t0", member_id="m1", task="x")])
    return board


def commands(conn: redis.Redis) -> int:
    """Commands the server has run, less the INFO calls that read it."""
    stats = conn.info("commandstats")
    total = sum(int(v["calls"]) for v in stats.values())
    return total - int(stats.get("cmdstat_info", {}).get("calls", 0))


def change(board: TaskBoard, token: str | None) -> str | None:
    """One board change: claim `t0` if free, else release it (each writes one event)."""
    if token is None:
        claimed = board.claim("t0", "m1", "bench:1", 3600)
        if claimed is None:
            raise RuntimeError(f"{board.keys.name}: t0 was not free to claim")
        return claimed
    board.release("t0", token, "bench")
    return None


def drive(boards: list[TaskBoard], changes: int, settled: Callable[[int], bool]) -> None:
    """`changes` board changes round-robin over `boards`; after each, wait for `settled(i)`
    (every page has sent change i and blocks again), so each change is measured alone rather
    than batched with the next into one read."""
    tokens: dict[int, str | None] = {}
    for i in range(changes):
        index = i % len(boards)
        tokens[index] = change(boards[index], tokens.get(index))
        wait_for(partial(settled, i), f"change {i} to settle")


@dataclass
class Pages:
    """SSE clients, one per run page, in a thread of their own; counts the task frames."""

    base: str
    run_ids: list[str]
    frames: int = 0
    connected: int = 0
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)

    async def follow(self, client: httpx.AsyncClient, run_id: str) -> None:
        async with client.stream("GET", f"{self.base}/runs/{run_id}/stream") as response:
            self.connected += 1
            async for line in response.aiter_lines():
                if line.startswith("event: task"):
                    self.frames += 1

    async def main(self, stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(
            timeout=None, limits=httpx.Limits(max_connections=1000)
        ) as client:
            tasks = [asyncio.create_task(self.follow(client, r)) for r in self.run_ids]
            await stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    @contextmanager
    def open(self) -> Iterator[Pages]:
        stop = asyncio.Event()
        thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self.main(stop),), daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self.loop.call_soon_threadsafe(stop.set)
            thread.join(30)


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.001)


def blocked(conn: redis.Redis) -> int:
    return int(conn.info("clients")["blocked_clients"])


@contextmanager
def dashboard(redis_url: str) -> Iterator[str]:
    """The dashboard app under uvicorn on a free loopback port, in a thread."""
    import uvicorn
    from teamctl.coordinator.web.app import DashboardConfig, create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Reads open (--no-auth): the pages' streams are what is measured, not signing in.
    config = DashboardConfig(redis_url=redis_url, token="bench", open_reads=True)
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "uvicorn to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def per_change(
    conn: redis.Redis, boards: list[TaskBoard], changes: int, pages: Pages | None
) -> float:
    """Commands per board change, all counted (the board's own and any page's)."""
    first = pages.frames if pages else 0

    def settled(i: int) -> bool:
        return pages is None or (pages.frames - first > i and blocked(conn) == len(pages.run_ids))

    before = commands(conn)
    drive(boards, changes, settled)
    return (commands(conn) - before) / changes


def run(sizes: Sizes) -> list[BenchFigure]:
    """Commands per change with no page, `sizes.few` pages and every page; idle commands/s."""
    runs, few_pages, changes, idle_s = sizes.runs, sizes.few, sizes.changes, sizes.idle_s
    with throwaway_redis() as url:
        conn = redis.Redis.from_url(url, decode_responses=True)
        boards = [live_run(conn, f"bench-{i:03d}") for i in range(runs)]
        own = per_change(conn, boards, changes, None)
        with dashboard(url) as base:
            few = Pages(base, [b.keys.name for b in boards[:few_pages]])
            with few.open():
                wait_for(lambda: blocked(conn) == few_pages, f"{few_pages} pages to block")
                with_few = per_change(conn, boards[:few_pages], changes, few)
            wait_for(lambda: blocked(conn) == 0, f"the {few_pages} pages to close")
            pages = Pages(base, [b.keys.name for b in boards])
            with pages.open():
                wait_for(lambda: blocked(conn) == runs, f"{runs} pages to block")
                idle_before = commands(conn)
                time.sleep(idle_s)  # the measured quiet window, not a synchronization
                idle = (commands(conn) - idle_before) / idle_s
                with_all = per_change(conn, boards, changes, pages)
        conn.close()
    added_few, added_all = with_few - own, with_all - own
    return [
        BenchFigure(
            name=f"commands/s added while idle, {runs} live run pages open",
            value=idle,
            unit="cmd/s",
            baseline=runs / 60,
            baseline_name=(f"one keep-alive XREAD a minute per page ({runs}/60)"),
            goal="<= 1.2x baseline (no polling)",
            met=idle <= 1.2 * runs / 60,
            note=f"{idle_s:.0f} s window",
        ),
        BenchFigure(
            name=f"commands added per board change, {runs} pages open (each change alone)",
            value=added_all,
            unit="cmd",
            baseline=own,
            baseline_name="the board's own commands per change, no page open",
            note="its page's XREAD with the entry, the XREAD that drains, HGET status",
        ),
        BenchFigure(
            name=f"commands added per board change, {runs} pages against {few_pages}",
            value=added_all,
            unit="cmd",
            baseline=added_few,
            baseline_name=f"the same with {few_pages} pages open",
            goal="ratio <= 1.2 (cost by event, not by page)",
            met=added_all <= 1.2 * added_few,
        ),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=FULL.runs, help="live runs, one page open on each"
    )
    parser.add_argument(
        "--changes", type=int, default=FULL.changes, help="board changes per measure"
    )
    parser.add_argument(
        "--idle-s",
        type=float,
        default=FULL.idle_s,
        help="quiet window (the keep-alive XREAD comes once a minute)",
    )
    args = parser.parse_args()
    try:
        sizes = replace(
            FULL,
            runs=args.runs,
            few=min(FULL.few, args.runs),
            changes=args.changes,
            idle_s=args.idle_s,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print_figures(run(sizes))


if __name__ == "__main__":
    main()
