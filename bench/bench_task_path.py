"""Task-path benchmark: where one member task's time and Redis commands go, phase by phase, on
the default worker (preloaded, its task processes kept for the run's next task) against RQ's
forking worker (preloaded too: the default before), from the Redis server's MONITOR stream.
Paced run_task jobs of one run, one at a time to an idle worker, call a zero-latency scripted
model through litellm. Each job is cut at the commands that start and end its phases:

1. RQ hands the job over: the job's enqueue (RPUSH) -> the task's first command (its spec);
2. our part before the call: the spec -> the provider gate's take (claim, dispatch input, the
   claim, run and budget checks);
3. the model call: the take (included) -> the gate's settle (litellm, the HTTP server);
4. our part after it: the settle -> the fenced `complete`, included (usage, journal,
   transcript);
5. RQ after the job: what follows `complete` -> the worker waiting again (its BLMOVE).

Commands are those the worker's processes send: a MULTI ... EXEC block counts as one, what a
Lua script runs inside Redis does not count, and neither do the benchmark's own. The counts do
not depend on the machine, so they guard the path: a change that adds a command per task to our
part misses the goal. MONITOR itself slows every command a little; the times are for comparing
phases, bench_worker's for the task's cost.

Run: .venv/bin/python -m bench.bench_task_path
It starts its own redis-server, model server and worker, and stops each by its pid.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import redis
from rq import Queue
from rq.job import JobStatus
from teamctl.coordinator.local_workers.processes import worker_command
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.redis.scripts import sources

from bench.bench_worker import FORKING, QUEUE, make_run, per_task_ms, wait_for_flag, worker
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

PACE_S = 0.1
OUR_COMMANDS_GOAL = 18
"""Commands of phases 2 and 4 a task sends today (12 before the call, 6 after it)."""
PHASES = (
    "RQ hands the job over",
    "ours before the model call",
    "the model call (the gate's take, litellm, server)",
    "ours after the reply",
    "RQ after the job",
)
OURS = (1, 3)
"""The phases that are teamctl's own code."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    tasks: int
    fork_workers: bool = False


FULL = Sizes(tasks=30)
SMOKE = Sizes(tasks=2, fork_workers=True)


@dataclass(frozen=True)
class Seen:
    """One command as MONITOR showed it."""

    time_s: float
    client: str
    words: list[str]


def sha(name: str) -> str:
    """The SHA redis-py sends a script by (EVALSHA)."""
    return hashlib.sha1(sources()[name].encode()).hexdigest()  # noqa: S324 - Redis's own id


class Monitor:
    """The server's MONITOR stream, collected on a thread until stopped."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.seen: list[Seen] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._collect, name="monitor", daemon=True)
        self._ready = threading.Event()

    def __enter__(self) -> Monitor:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("MONITOR did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        redis.Redis.from_url(self.url).ping()  # one more command, so the reader wakes
        self._thread.join(10)

    def _collect(self) -> None:
        with redis.Redis.from_url(self.url, decode_responses=True).monitor() as monitor:
            self._ready.set()
            for command in monitor.listen():
                if self._stop.is_set():
                    return
                self.seen.append(_seen(command))


def _seen(command: dict[str, Any]) -> Seen:
    client = f"{command.get('client_address')}:{command.get('client_port')}"
    return Seen(command["time"], client, str(command["command"]).split(" "))


def job_phases(seen: list[Seen], job_id: str, run_id: str) -> tuple[list[float], list[int]]:
    """Each phase's ms and commands for the job `job_id` (a task of `run_id`)."""
    take, settle, complete = sha("limits_take"), sha("limits_settle"), sha("complete")
    starts: list[Callable[[Seen], bool]] = [
        enqueue_of(job_id),
        lambda s: s.words[:2] == ["GET", RunKeys(run_id).spec],
        lambda s: s.words[:2] == ["EVALSHA", take],
        lambda s: s.words[:2] == ["EVALSHA", settle],
        lambda s: s.words[:2] == ["EVALSHA", complete],
        lambda s: s.words[0] == "BLMOVE",
    ]
    marks = [0]
    for phase, starts_phase in enumerate(starts):
        marks.append(_first(seen, marks[-1], starts_phase, f"phase {phase} of job {job_id}"))
    marks = marks[1:]
    marks[4] += 1  # `complete` ends our part: the phase after it is RQ's
    bench = seen[marks[0]].client  # the enqueuer: this benchmark
    times = [(seen[b].time_s - seen[a].time_s) * 1000 for a, b in pairwise(marks)]
    counts = [_commands(seen[a:b], bench) for a, b in pairwise(marks)]
    return times, counts


def _first(seen: list[Seen], start: int, match: Callable[[Seen], bool], what: str) -> int:
    for n in range(start, len(seen)):
        if match(seen[n]):
            return n
    raise RuntimeError(f"the command that ends {what} was not seen before the next job")


def _commands(seen: list[Seen], bench: str) -> int:
    """Commands the worker's processes sent: a MULTI ... EXEC block is one; a script's own
    (client `lua`) and the benchmark's are none."""
    count = 0
    in_block: set[str] = set()
    for command in seen:
        if command.client == bench or command.client.startswith("lua"):
            continue
        verb = command.words[0].upper()
        if verb == "MULTI":
            in_block.add(command.client)
            count += 1
        elif verb == "EXEC":
            in_block.discard(command.client)
        elif command.client not in in_block:
            count += 1
    return count


def collect(sizes: Sizes, worker_class: str | None) -> tuple[list[float], list[float]]:
    """Each phase's median ms and median commands over the paced tasks, on a worker of
    `worker_class` (None: the default one)."""
    llm = ScriptedLLM()
    llm.start()
    model = llm.script("task-path-member", ["done"], repeat_last=True)
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            throwaway_redis() as url,
            worker(
                worker_command(url, [QUEUE], worker_class=worker_class),
                Path(tmp) / "worker.log",
                url,
                forked=sizes.fork_workers,
            ),
        ):
            conn = redis.Redis.from_url(url, decode_responses=True)
            queue = Queue(QUEUE, connection=redis.Redis.from_url(url))
            run_id = f"task-path-{os.getpid()}"
            make_run(conn, run_id, model, llm.api_base, sizes.tasks + 1, Path(tmp))
            per_task_ms(queue, [("teamctl.worker.jobs.run_task", (run_id, "t0"))])  # warm-up
            jobs: list[str] = []
            with Monitor(url) as monitor:
                for n in range(1, sizes.tasks + 1):
                    time.sleep(PACE_S)  # pacing, not synchronization: the worker sits idle
                    job = queue.enqueue("teamctl.worker.jobs.run_task", run_id, f"t{n}")
                    jobs.append(job.id)
                    wait_for_flag(
                        lambda job=job: job.get_status(refresh=True) == JobStatus.FINISHED,
                        f"task t{n}",
                    )
                # The last job's tail ends when the worker waits for the next one.
                wait_for_flag(lambda: waits_again(monitor.seen, jobs[-1]), "the worker to wait")
            phases = [
                job_phases(seen, job_id, run_id) for job_id, seen in per_job(monitor.seen, jobs)
            ]
    finally:
        llm.stop()
    times = [statistics.median(p[0][n] for p in phases) for n in range(len(PHASES))]
    counts = [statistics.median(p[1][n] for p in phases) for n in range(len(PHASES))]
    return times, counts


def per_job(seen: list[Seen], jobs: list[str]) -> list[tuple[str, list[Seen]]]:
    """Each job with the commands from its enqueue to the next job's (paced: one at a time)."""
    starts = [_first(seen, 0, enqueue_of(job), f"job {job}") for job in jobs]
    ends = [*starts[1:], len(seen)]
    return [(job, seen[a:b]) for job, a, b in zip(jobs, starts, ends, strict=True)]


def enqueue_of(job_id: str) -> Callable[[Seen], bool]:
    """Whether a command is the enqueue of `job_id`."""
    return lambda seen: seen.words[:3] == ["RPUSH", f"rq:queue:{QUEUE}", job_id]


def waits_again(seen: list[Seen], job_id: str) -> bool:
    """Whether a worker waited for a job (BLMOVE) after `job_id` was enqueued."""
    is_enqueue = enqueue_of(job_id)
    enqueued = next((n for n, s in enumerate(seen) if is_enqueue(s)), None)
    return enqueued is not None and any(s.words[0] == "BLMOVE" for s in seen[enqueued + 1 :])


def figures(smoke: bool = False) -> list[BenchFigure]:
    """Each phase's median time and commands; the guard on our commands per task (the
    default size, or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    before, before_counts = collect(sizes, FORKING)
    times, counts = collect(sizes, None)
    note = f"median of {sizes.tasks} paced tasks"
    rows = [
        BenchFigure(
            name=f"{n + 1}. {phase}",
            value=times[n],
            unit="ms",
            baseline=before[n],
            baseline_name="the same on RQ's forking worker",
            note=f"{counts[n]:g} commands (forking worker: {before_counts[n]:g}); {note}",
        )
        for n, phase in enumerate(PHASES)
    ]
    ours = sum(counts[n] for n in OURS)
    rows.append(
        BenchFigure(
            name="Redis commands of our part of a task (phases 2 and 4)",
            value=ours,
            unit="commands",
            goal=f"<= {OUR_COMMANDS_GOAL}",
            met=ours <= OUR_COMMANDS_GOAL,
            note=f"{counts[OURS[0]]:g} before the call, {counts[OURS[1]]:g} after; {note}",
        )
    )
    return rows


def main() -> int:
    return print_figures(figures())


if __name__ == "__main__":
    sys.exit(main())
