"""Tracing benchmark: per-task time of `teamctl.worker.jobs.run_task` on a preloaded forking
worker whose jobs export their spans (OTLP/HTTP to a loopback receiver: an `invoke_agent` and a
`chat` span per task, flushed before each forked job exits) against the same on a worker with
the OTEL variables unset, measured in the same run, in alternating rounds, with a zero-latency
scripted model: what tracing adds to a task when the model costs nothing.

Run: .venv/bin/python -m bench.bench_tracing
It starts its own redis-server, model server, receiver and workers, and stops each by its pid.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import redis
from rq import Queue
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.tracing import TRACEPARENT_META

from bench.bench_worker import make_run, per_task_ms, registered_pids, wait_for_flag, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM
from tests.support.otlp_receiver import otlp_receiver

QUEUES = {"off": "plain", "on": "traced"}
PARENT = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
"""The round's span a traced job's meta names, as a coordinator's dispatch would."""
RATIO_GOAL = 1.25


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    """Timed tasks per round and worker (after a warm-up one)."""
    rounds: int
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(tasks=40, rounds=5)
SMOKE = Sizes(tasks=2, rounds=1, fork_workers=True)


def run_tasks_ms(queue: Queue, run_id: str, tasks: range) -> float:
    """Per-task ms of the run's tasks `tasks`, enqueued at once with a traceparent in each meta,
    on the queue's one worker."""
    return per_task_ms(
        queue,
        [("teamctl.worker.jobs.run_task", (run_id, f"t{n}")) for n in tasks],
        meta={TRACEPARENT_META: PARENT},
    )


def collect(sizes: Sizes) -> tuple[dict[str, float], float]:
    """Median per-task ms with tracing off and on, and the spans received per traced task."""
    if any(name.startswith("OTEL_") for name in os.environ):  # the "off" worker inherits them
        raise RuntimeError("unset the OTEL_* variables: the untraced worker must be untraced")
    with ExitStack() as stack:
        llm = ScriptedLLM()
        llm.start()
        stack.callback(llm.stop)
        model = llm.script("bench-member", ["done"], repeat_last=True)
        receiver = stack.enter_context(otlp_receiver())
        url = stack.enter_context(throwaway_redis())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        workspace = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        processes = [
            stack.enter_context(
                worker(
                    worker_command(url, [QUEUES[label]]),
                    logs / f"{label}.log",
                    url,
                    {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint} if label == "on" else None,
                    forked=sizes.fork_workers,
                )
            )
            for label in QUEUES
        ]
        wait_for_flag(lambda: {p.pid for p in processes} <= registered_pids(url), "both workers")
        conn = redis.Redis.from_url(url, decode_responses=True)
        rq_conn = redis.Redis.from_url(url)
        times: dict[str, list[float]] = {label: [] for label in QUEUES}
        for round_no in range(sizes.rounds):
            # Tracing goes first in odd rounds, so neither always follows the other.
            order = list(QUEUES) if round_no % 2 == 0 else list(reversed(QUEUES))
            for label in order:
                run_id = f"bench-tracing-{label}-{round_no}-{os.getpid()}"
                make_run(conn, run_id, model, llm.api_base, sizes.tasks + 1, workspace)
                queue = Queue(QUEUES[label], connection=rq_conn)
                run_tasks_ms(queue, run_id, range(1))  # a warm-up job, not counted
                times[label].append(run_tasks_ms(queue, run_id, range(1, sizes.tasks + 1)))
                done = [t.status.value for t in TaskBoard(conn, RunKeys(run_id)).snapshot()]
                if done.count("completed") != sizes.tasks + 1:
                    raise RuntimeError(f"{label}: tasks not all completed: {done}")
        traced_tasks = sizes.rounds * (sizes.tasks + 1)
        spans = len(receiver.snapshot())
    return {
        label: statistics.median(values) for label, values in times.items()
    }, spans / traced_tasks


def figures(smoke: bool = False) -> list[BenchFigure]:
    """Per-task time traced against untraced, same worker kind, same rounds (the default sizes,
    or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    medians, spans_per_task = collect(sizes)
    ratio = medians["on"] / medians["off"]
    return [
        BenchFigure(
            name="run_task, queued, tracing on (OTLP/HTTP to a loopback receiver)",
            value=medians["on"],
            unit="ms",
            baseline=medians["off"],
            baseline_name="run_task, tracing off, same rounds",
            goal=f"ratio <= {RATIO_GOAL}",
            met=ratio <= RATIO_GOAL,
            note=f"{sizes.rounds} rounds of {sizes.tasks} tasks; {spans_per_task:.1f} spans per "
            f"task",
        ),
        BenchFigure(
            name="tracing's cost per task",
            value=medians["on"] - medians["off"],
            unit="ms",
            note="a provider and exporter per forked job, flushed at its end",
        ),
    ]


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
