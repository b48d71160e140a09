"""Teammate benchmark: wake latency and idle cost on one preloaded worker (the default class).

- Wake latency: `send` from the lead to an idle teammate, until the teammate's first model
  request reaches the scripted zero-latency server. Baseline, in the same run on the same worker:
  enqueue to start of a bare RQ no-op job. Goals: p50 <= 50 ms, p95 <= 100 ms, p50 <= 1.3x baseline.
- Mid-turn delivery: a message sent while a turn's model call is in flight is in that turn's next
  model request. Goal: 100 %.
- Auto-claim: 8 idle teammates of one role, one task added at a time: from the add to the claim
  (the add's own return), and to the claiming teammate's first model request. Goals: add to
  request p50 <= the wake latency's; exactly one teammate's turn starts per task.
- Idle cost: 20 idle teammates for 60 s: no jobs, no model requests, no script calls; the worker's
  CPU time within 1.1x of the same window on the same worker before any teammate existed.

Run: .venv/bin/python -m bench.bench_teammates
It starts its own redis-server, model server and worker, and stops each by its pid.
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import redis
from rq import Queue, Worker
from rq.job import Job, JobStatus
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.task_records import TaskStatus
from teamctl.shared.teams.tasks import TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from bench.bench_worker import NOOP_JOB, QUEUE, wait_for_flag, worker
from bench.figures import BenchFigure
from tests.support.llm import ScriptedLLM, ToolCalls


@dataclass
class Window:
    """What happened on the server and in the worker during one idle window."""

    jobs: int = 0
    requests: int = 0
    script_calls: int = 0
    worker_cpu_s: float = 0.0


@dataclass
class MidTurnModel:
    """Each turn's first call sends the teammate a message while the call is in flight (then
    calls a tool); its second call records whether that message reached it."""

    store: TeamStore
    name: str
    turns: int = 0
    delivered: int = 0

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        replies = [m for m in body["messages"] if m["role"] == "assistant"]
        if replies and replies[-1].get("tool_calls"):
            marker = f"mid {self.turns}"
            self.delivered += any(marker in str(m.get("content")) for m in body["messages"])
            return "done"
        self.turns += 1
        self.store.messages.send("lead", self.name, f"mid {self.turns}")
        return ToolCalls([("list_teammates", {})])


WAKE_GAP_S = float(os.environ.get("BENCH_WAKE_GAP_S", "0"))
"""Pause between a teammate going idle and the next send (0: at once, the worst case for a worker
that prepares its next job's process while idle)."""
WORKER_CLASS = os.environ.get("BENCH_WORKER_CLASS")
"""An RQ worker class to measure instead of the default one (`-w`)."""
GOAL_IDLE_CPU_RATIO = 1.1
GOAL_P50_MS, GOAL_P95_MS, GOAL_RATIO = 50.0, 100.0, 1.3


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    wakes: int
    mid_turns: int
    claimers: int
    claim_tasks: int
    idle_mates: int
    idle_watch_s: float
    """The idle windows' length."""
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(
    wakes=200,
    mid_turns=100,
    claimers=8,
    claim_tasks=50,
    idle_mates=20,
    idle_watch_s=float(os.environ.get("BENCH_IDLE_S", "60")),
)
"""BENCH_IDLE_S shortens the idle windows while iterating on the other figures."""
SMOKE = Sizes(
    wakes=3,
    mid_turns=2,
    claimers=2,
    claim_tasks=2,
    idle_mates=2,
    idle_watch_s=1.0,
    fork_workers=True,
)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def wake_latencies_ms(
    store: TeamStore, llm: ScriptedLLM, model: str, name: str, wakes: int
) -> list[float]:
    """Per wake: the lead's send until the teammate's model request arrives (same clock)."""
    latencies = []
    for index in range(wakes):
        wait_for_flag(lambda: store.get(name).status is TeammateStatus.IDLE, f"{name} to be idle")
        time.sleep(WAKE_GAP_S)  # pacing, not synchronization: a lead that replies later
        seen = len(llm.request_times[model.removeprefix("openai/")])
        sent_s = time.monotonic()
        store.messages.send("lead", name, f"wake {index}")
        wait_for_flag(
            lambda seen=seen: len(llm.request_times[model.removeprefix("openai/")]) > seen,
            "the teammate's model request",
        )
        latencies.append((llm.request_times[model.removeprefix("openai/")][seen] - sent_s) * 1000)
    return latencies


def noop_latencies_ms(conn: redis.Redis, count: int) -> list[float]:
    """Enqueue to start of a bare no-op job on the same worker (RQ's own per-job cost)."""
    queue = Queue(QUEUE, connection=conn)
    latencies = []
    for _ in range(count):
        enqueued = datetime.now(UTC)
        job = queue.enqueue(NOOP_JOB)
        wait_for_flag(partial(_finished, job), "the no-op job")
        started_at = Job.fetch(job.id, connection=conn).started_at
        assert started_at is not None, "a finished job has started"
        started = started_at.replace(tzinfo=UTC)
        latencies.append((started - enqueued).total_seconds() * 1000)
    return latencies


def mid_turn_delivery(store: TeamStore, llm: ScriptedLLM, turns: int) -> tuple[int, int]:
    """(delivered, turns): messages sent during a turn's model call that its next call saw."""
    model = MidTurnModel(
        TeamStore(redis.Redis.from_url(_url(store), decode_responses=True), store.team), "carol"
    )
    name = llm.script("carol", handler=model)
    store.spawn(
        "carol",
        role="bench",
        prompt="Check the team, then answer.",
        model=name,
        api_base=llm.api_base,
        queue=QUEUE,
    )
    while True:
        wait_for_flag(lambda: store.get("carol").status is TeammateStatus.IDLE, "carol to be idle")
        if model.turns >= turns:
            return model.delivered, model.turns
        # The mid-turn message of the last turn was handled by a turn of its own: the next
        # turn starts from the lead's send.
        store.messages.send("lead", "carol", "go")


class Claimer:
    """A teammate's model that completes the task a task.assigned message gives it, then
    answers; records when each request arrived."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        self.arrivals.append(time.monotonic())
        replies = [m for m in body["messages"] if m["role"] == "assistant"]
        held = re.findall(r"task_\d+", str(body["messages"][-1].get("content")))
        if held and not (replies and replies[-1].get("tool_calls")):
            return ToolCalls([("complete_task", {"task_id": held[0], "result": "done"})])
        return "ok"


def auto_claim(
    store: TeamStore, llm: ScriptedLLM, sizes: Sizes
) -> tuple[list[float], list[float], int]:
    """Per task: add -> claimed (ms), add -> the claimer's first request (ms); and how many
    tasks started other than exactly one teammate's turn."""
    models = {f"claim{n}": Claimer() for n in range(sizes.claimers)}
    for name, model in models.items():
        store.spawn(
            name,
            role="claimer",
            prompt="Wait for tasks.",
            model=llm.script(f"{name}", handler=model),
            api_base=llm.api_base,
            queue=QUEUE,
        )
    tasks = TeamTasks(store)
    to_claim, to_request, not_one = [], [], 0
    for index in range(sizes.claim_tasks):
        wait_for_flag(
            lambda: all(store.get(n).status is TeammateStatus.IDLE for n in models), "idle"
        )
        before = {name: len(model.arrivals) for name, model in models.items()}
        added_s = time.monotonic()
        task, woke = tasks.add(f"task {index}", role="claimer")
        to_claim.append((time.monotonic() - added_s) * 1000)
        wait_for_flag(
            lambda tid=task.task_id: tasks.get(tid).status is TaskStatus.COMPLETED, "the task"
        )
        started = [n for n, m in models.items() if len(m.arrivals) > before[n]]
        not_one += started != woke or len(started) != 1
        if started:
            to_request.append((models[started[0]].arrivals[before[started[0]]] - added_s) * 1000)
    return to_claim, to_request, not_one


def _url(store: TeamStore) -> str:
    kwargs = store.conn.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def watch(conn: redis.Redis, llm: ScriptedLLM, model: str, seconds: float) -> Window:
    """Jobs, model requests, script calls and worker CPU over `seconds` of nothing to do."""
    queue = Queue(QUEUE, connection=conn)
    pids = [w.pid for w in Worker.all(connection=conn) if w.pid is not None]
    before = Window(
        queue.finished_job_registry.count + queue.count,
        len(llm.request_times.get(model.removeprefix("openai/"), [])),
        _script_calls(conn),
        sum(_cpu_s(pid) for pid in pids),
    )
    time.sleep(seconds)  # the measurement window itself: nothing should happen in it
    return Window(
        queue.finished_job_registry.count + queue.count - before.jobs,
        len(llm.request_times.get(model.removeprefix("openai/"), [])) - before.requests,
        _script_calls(conn) - before.script_calls,
        sum(_cpu_s(pid) for pid in pids) - before.worker_cpu_s,
    )


def _script_calls(conn: redis.Redis) -> int:
    stats = conn.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("eval", "evalsha"))


def _finished(job: Job) -> bool:
    return job.get_status(refresh=True) == JobStatus.FINISHED


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cost(
    store: TeamStore, conn: redis.Redis, llm: ScriptedLLM, model: str, sizes: Sizes
) -> Window:
    """The idle window with `sizes.idle_mates` idle teammates."""
    for n in range(sizes.idle_mates):
        store.spawn(
            f"idle{n}", role="idle", prompt="Rest.", model=model, api_base=llm.api_base, queue=QUEUE
        )
    wait_for_flag(
        lambda: all(m.status is TeammateStatus.IDLE for m in store.teammates()), "every mate idle"
    )
    queue = Queue(QUEUE, connection=conn)
    # A turn ends (idle) just before its job does: let the last jobs finish first.
    wait_for_flag(
        lambda: queue.count == 0 and queue.started_job_registry.count == 0, "jobs to finish"
    )
    return watch(conn, llm, model, sizes.idle_watch_s)


Collected = tuple[
    list[float], list[float], tuple[int, int], tuple[list[float], list[float], int], Window, Window
]


def collect(sizes: Sizes) -> Collected:
    """Wake and no-op latencies, mid-turn delivery, auto-claim, and the two idle windows."""
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            throwaway_redis(Path(tmp)) as url,
            worker(
                worker_command(url, [QUEUE], worker_class=WORKER_CLASS),
                Path(tmp) / "worker.log",
                url,
                forked=sizes.fork_workers,
            ),
        ):
            conn = redis.Redis.from_url(url)
            store = TeamStore(redis.Redis.from_url(url, decode_responses=True), "bench")
            idle = llm.script("idle", ["resting"], repeat_last=True)
            no_team = watch(conn, llm, idle, sizes.idle_watch_s)
            model = llm.script("bob", ["ok"], repeat_last=True)
            store.spawn(
                "bob",
                role="bench",
                prompt="Answer ok.",
                model=model,
                api_base=llm.api_base,
                queue=QUEUE,
            )
            wakes = wake_latencies_ms(store, llm, model, "bob", sizes.wakes)
            noops = noop_latencies_ms(conn, sizes.wakes)
            delivered, turns = mid_turn_delivery(store, llm, sizes.mid_turns)
            claims = auto_claim(store, llm, sizes)
            idle_window = idle_cost(store, conn, llm, idle, sizes)
    finally:
        llm.stop()
    return wakes, noops, (delivered, turns), claims, no_team, idle_window


def cpu_ratio(idle: Window, no_team: Window) -> float:
    """Worker CPU with idle teammates over without: /proc counts in clock ticks, so two windows
    both under one tick used the same (none)."""
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    if max(idle.worker_cpu_s, no_team.worker_cpu_s) < tick_s:
        return 1.0
    return idle.worker_cpu_s / max(no_team.worker_cpu_s, tick_s)


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: wake latency against a no-op job, mid-turn delivery, auto-claim, and
    the idle windows (the default sizes, or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    wakes, noops, (delivered, turns), (_, to_request, not_one), no_team, idle = collect(sizes)
    p50, p95, base = statistics.median(wakes), percentile(wakes, 0.95), statistics.median(noops)
    claim_p50 = statistics.median(to_request)
    ratio = cpu_ratio(idle, no_team)
    idle_events = idle.jobs + idle.requests + idle.script_calls
    return [
        BenchFigure(
            name="teammate wake p50 (send -> model request)",
            value=p50,
            unit="ms",
            baseline=base,
            baseline_name="no-op RQ job enqueue -> start p50",
            goal=f"<= {GOAL_P50_MS:.0f} ms and <= {GOAL_RATIO:g}x",
            met=p50 <= GOAL_P50_MS and p50 <= GOAL_RATIO * base,
            note=f"{sizes.wakes} wakes",
        ),
        BenchFigure(
            name="teammate wake p95",
            value=p95,
            unit="ms",
            baseline=percentile(noops, 0.95),
            baseline_name="no-op RQ job p95",
            goal=f"<= {GOAL_P95_MS:.0f} ms",
            met=p95 <= GOAL_P95_MS,
        ),
        BenchFigure(
            name="mid-turn delivery",
            value=100 * delivered / turns,
            unit="%",
            goal="100 %",
            met=delivered == turns,
            note=f"{delivered}/{turns}",
        ),
        BenchFigure(
            name="auto-claim: add -> claimer's model request p50",
            value=claim_p50,
            unit="ms",
            baseline=p50,
            baseline_name="teammate wake p50",
            goal="<= wake p50",
            met=claim_p50 <= p50,
            note=f"{sizes.claim_tasks} tasks, {sizes.claimers} idle teammates",
        ),
        BenchFigure(
            name="auto-claim: tasks not started by exactly one turn",
            value=not_one,
            unit="tasks",
            goal="0",
            met=not_one == 0,
        ),
        BenchFigure(
            name=f"idle: jobs + model requests + script calls, {sizes.idle_mates} teammates",
            value=idle_events,
            unit="events",
            goal="0",
            met=idle_events == 0,
            note=f"{sizes.idle_watch_s:.0f} s window",
        ),
        BenchFigure(
            name=f"idle: worker CPU, {sizes.idle_mates} idle teammates",
            value=idle.worker_cpu_s,
            unit="s",
            baseline=no_team.worker_cpu_s,
            baseline_name="same window, no team",
            goal=f"<= {GOAL_IDLE_CPU_RATIO}x",
            met=ratio <= GOAL_IDLE_CPU_RATIO,
            note=f"{sizes.idle_watch_s:.0f} s window",
        ),
    ]


def main() -> int:
    return report(*collect(FULL), FULL)


def report(
    wakes: list[float],
    noops: list[float],
    mid_turn: tuple[int, int],
    claims: tuple[list[float], list[float], int],
    no_team: Window,
    idle: Window,
    sizes: Sizes,
) -> int:
    p50, p95 = statistics.median(wakes), percentile(wakes, 0.95)
    base = statistics.median(noops)
    print(f"wake latency, {sizes.wakes} sends to an idle teammate (send -> its model request):")
    print(f"  teammate wake: p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
    print(
        f"  no-op RQ job:  p50 {base:7.1f} ms  p95 {percentile(noops, 0.95):7.1f} ms"
        " (enqueue -> start, same worker)"
    )
    verdicts = {
        f"p50 <= {GOAL_P50_MS:.0f} ms": p50 <= GOAL_P50_MS,
        f"p95 <= {GOAL_P95_MS:.0f} ms": p95 <= GOAL_P95_MS,
        f"p50 <= {GOAL_RATIO:g}x baseline ({p50 / base:.2f}x)": p50 <= GOAL_RATIO * base,
    }
    delivered, turns = mid_turn
    print(
        f"mid-turn delivery: {delivered}/{turns} messages sent during a model call were in "
        "the turn's next model request (goal 100 %)"
    )
    verdicts["mid-turn delivery 100 %"] = delivered == turns
    to_claim, to_request, not_one = claims
    claim_p50 = statistics.median(to_request)
    print(
        f"auto-claim, {sizes.claim_tasks} tasks added one at a time to {sizes.claimers} idle "
        "teammates: "
        f"add -> claimed p50 {statistics.median(to_claim):.1f} ms; add -> claimer's model "
        f"request p50 {claim_p50:.1f} ms p95 {percentile(to_request, 0.95):.1f} ms; "
        f"tasks not started by exactly one turn: {not_one}"
    )
    verdicts[f"auto-claim p50 <= wake p50 ({claim_p50:.1f} vs {p50:.1f} ms)"] = claim_p50 <= p50
    verdicts["auto-claim: one turn per task"] = not_one == 0
    ratio = cpu_ratio(idle, no_team)
    print(
        f"idle cost, {sizes.idle_mates} idle teammates for {sizes.idle_watch_s:.0f} s: "
        f"{idle.jobs} jobs, "
        f"{idle.requests} model requests, {idle.script_calls} script calls (goal 0, 0, 0); "
        f"worker CPU {idle.worker_cpu_s:.2f} s vs {no_team.worker_cpu_s:.2f} s with no team "
        f"({ratio:.2f}x, goal <= {GOAL_IDLE_CPU_RATIO}x)"
    )
    verdicts["idle: 0 jobs, 0 requests, 0 script calls"] = (
        idle.jobs == 0 and idle.requests == 0 and idle.script_calls == 0
    )
    verdicts[f"idle worker CPU <= {GOAL_IDLE_CPU_RATIO}x"] = ratio <= GOAL_IDLE_CPU_RATIO
    for goal, met in verdicts.items():
        print(f"  {goal}: {'ok' if met else 'MISSED'}")
    hard = (
        "mid-turn delivery 100 %",
        "idle: 0 jobs, 0 requests, 0 script calls",
        "auto-claim: one turn per task",
    )
    return 0 if all(verdicts[goal] for goal in hard) else 1


if __name__ == "__main__":
    sys.exit(main())
