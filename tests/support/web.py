"""Runs for the web view's tests: a board driven the way workers drive it (claims by named
worker processes, an expired claim reclaimed, a stale worker's late write refused), and the
dashboard served by real uvicorn on a free loopback port, stopped by its handle, or started as
the `teamctl dashboard` command, stopped by its pid; a client signed in as a browser is."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
import redis
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.bus import MessageBus
from teamctl.shared.clock import now_ms
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.options import RunOptions
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import TaskSpec
from teamctl.shared.team_file import Member

from tests.support.cli import TEAMCTL
from tests.support.runs import coordinator_store
from tests.support.waiting import wait_until

TTL_S = 30.0
TOKEN = "s3cret-token-for-tests"
"""The token of the dashboards `served` starts."""
HOSTILE = "<script>alert('owned')</script>"
"""What a model might write: must reach a page escaped, never as markup."""
TRANSCRIPT = [
    {"role": "system", "content": "You are m1."},
    {"role": "user", "content": "Find facts"},
    {"role": "assistant", "content": f"the facts {HOSTILE}"},
]


@dataclass
class DrivenRun:
    """A run whose board the test drives as its workers would."""

    run_id: str
    board: TaskBoard
    store: RunStore
    bus: MessageBus


def start_run(
    conn: redis.Redis,
    run_id: str,
    *,
    heartbeat_ttl_s: float = 30.0,
    tasks: list[TaskSpec] | None = None,
    max_cost_usd: float | None = None,
) -> DrivenRun:
    """A running run of members m1, m2 with tasks `a` and `b` (b depends on a), or `tasks`,
    no workers; a cost budget if given."""
    spec = RunSpec(
        run_id=run_id,
        team_id="t",
        objective=f"Objective {HOSTILE}",
        members=[Member(id="m1"), Member(id="m2")],
        options=RunOptions(heartbeat_ttl_s=heartbeat_ttl_s, max_cost_usd=max_cost_usd),
        models=ModelChoice(planner="p", synthesizer="s", member_default="m"),
        workspace_dir="/tmp",
        created_ms=now_ms(),
    )
    keys = RunKeys(run_id)
    RunStore(conn, keys).create(spec)
    store = coordinator_store(conn, run_id)
    store.set_status(RunStatus.RUNNING)
    board = TaskBoard(conn, keys)
    board.create(
        tasks
        or [
            TaskSpec(id="a", member_id="m1", task="Find facts"),
            TaskSpec(id="b", member_id="m2", task="Write it up", depends_on=["a"]),
        ]
    )
    return DrivenRun(run_id, board, store, MessageBus(conn, keys))


def chain(length: int) -> list[TaskSpec]:
    """A plan that is one chain, c1 <- c2 <- ... <- cN, listed dependents-first: laying it out
    walks the whole chain from its first task."""
    return [
        TaskSpec(
            id=f"c{i}", member_id="m1", task=f"Step {i}", depends_on=[f"c{i - 1}"] if i > 1 else []
        )
        for i in range(length, 0, -1)
    ]


def expire_claim(conn: redis.Redis, board: TaskBoard, task_id: str) -> None:
    """Let the claim's real TTL run out (1 ms), as when its worker died."""
    key = board.keys.heartbeat(task_id)
    conn.pexpire(key, 1)
    wait_until(lambda: not conn.exists(key), 5, message=f"heartbeat of {task_id} to expire")


def reclaim_first_attempt(conn: redis.Redis, run: DrivenRun) -> str:
    """Task `a` claimed by worker hostA:101, which dies: its claim expires and is reclaimed.
    Returns the dead claim's token."""
    stale = run.board.claim("a", "m1", "hostA:101", TTL_S)
    assert stale is not None
    expire_claim(conn, run.board, "a")
    assert run.board.reclaim_expired(3) == ["a"]
    return stale


def finish_run(conn: redis.Redis, run: DrivenRun, stale: str) -> None:
    """Task `a` done by hostB:202 (its output hostile), the dead worker's late write refused,
    `b` done, a message on the bus, and the run completed."""
    token = run.board.claim("a", "m1", "hostB:202", TTL_S)
    assert token is not None
    assert Transcripts(conn, RunKeys(run.run_id)).save("a", token, TRANSCRIPT, 100_000)
    assert run.board.complete("a", token, f"facts {HOSTILE}", 40) is WriteOutcome.APPLIED
    assert run.board.complete("a", stale, "late", 5) is WriteOutcome.STALE
    run.bus.send("m1", "m2", None, "a", f"see {HOSTILE}")
    token = run.board.claim("b", "m2", "hostB:202", TTL_S)
    assert token is not None
    assert run.board.complete("b", token, "the write-up", 30) is WriteOutcome.APPLIED
    run.store.finish(RunEnd(RunStatus.COMPLETED, 3600, output="the answer"))


def finished_run(conn: redis.Redis, run_id: str) -> DrivenRun:
    """A completed run in which task `a` took two attempts on two workers."""
    run = start_run(conn, run_id)
    finish_run(conn, run, reclaim_first_attempt(conn, run))
    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(
    redis_url: str, *, allow_control: bool = False, open_reads: bool = False
) -> Iterator[str]:
    """The dashboard app under real uvicorn on 127.0.0.1, in a thread, its token TOKEN; yields
    its base URL. Stopped through its server handle (should_exit), and the thread joined."""
    import uvicorn
    from teamctl.coordinator.web.app import DashboardConfig, create_app

    port = free_port()
    app = create_app(
        DashboardConfig(
            redis_url=redis_url, token=TOKEN, allow_control=allow_control, open_reads=open_reads
        )
    )
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 15, message="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive(), "uvicorn did not stop"


@contextmanager
def signed_in(base: str, token: str = TOKEN) -> Iterator[httpx.Client]:
    """A client holding the dashboard's cookie, got as a browser gets it: the printed URL
    (`/?token=`) answered by a redirect to `/` that sets it."""
    with httpx.Client(base_url=base, timeout=30) as client:
        answer = client.get("/", params={"token": token})
        assert (answer.status_code, answer.headers["location"]) == (303, "/"), answer.text
        assert client.cookies, "the printed URL set no cookie"
        yield client


@dataclass
class Printed:
    """What `teamctl dashboard` printed at start."""

    url: str
    """The URL to open, as printed (with `?token=` unless reads are open)."""
    base: str
    control_token: str | None


@contextmanager
def dashboard_command(redis_url: str, *flags: str) -> Iterator[Printed]:
    """`teamctl dashboard --port 0 FLAGS` in its own process (a free port), answering once it
    has printed; stopped by its pid with SIGTERM, which it must obey."""
    process = subprocess.Popen(
        [*TEAMCTL, "dashboard", "--port", "0", *flags, "--redis-url", redis_url],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith("teamctl dashboard: http://127.0.0.1:"), first
        url = first.split()[2]
        control = None
        if "--allow-control" in flags:
            control = process.stderr.readline().removeprefix("control token: ").strip()
        base = url.split("/?")[0].rstrip("/")
        wait_until(lambda: answers(base), 15, message="the dashboard to answer")
        yield Printed(url=url, base=base, control_token=control)
    finally:
        os.kill(process.pid, signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught.
        assert process.wait(15) in (0, -signal.SIGTERM)


def answers(base: str) -> bool:
    try:
        httpx.get(base + "/", timeout=5)
    except httpx.TransportError:
        return False
    return True
