"""Teammate benchmark (issue 12 §10): wake latency and idle cost on one preloaded forking worker.

- Wake latency: `send` from the lead to an idle teammate, until the teammate's first model
  request reaches the scripted zero-latency server. Baseline, in the same run on the same worker:
  enqueue to start of a bare RQ no-op job. Goals: p50 <= 50 ms, p95 <= 100 ms, p50 <= 2x baseline.
- Idle cost: idle teammates for a while: no jobs and no model requests.

Run: .venv/bin/python -m bench.bench_teammates
It starts its own redis-server, model server and worker, and stops each by its pid.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
from rq import Queue
from teamctl.coordinator.cli.local_workers import worker_command
from teamctl.shared.embedded_redis import throwaway_redis
from teamctl.shared.teammates import MateStatus
from teamctl.shared.teams import TeamStore

from bench.bench_worker import NOOP_JOB, QUEUE, _wait, worker
from tests.scripted_llm import ScriptedLLM

WAKES = 200
IDLE_MATES = 20
IDLE_WATCH_S = 10.0
GOAL_P50_MS, GOAL_P95_MS, GOAL_RATIO = 50.0, 100.0, 2.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def wake_latencies_ms(store: TeamStore, llm: ScriptedLLM, model: str, name: str) -> list[float]:
    """Per wake: the lead's send until the teammate's model request arrives (same clock)."""
    latencies = []
    for index in range(WAKES):
        _wait(lambda: store.get(name).status is MateStatus.IDLE, f"{name} to be idle")
        seen = len(llm.request_times[model.removeprefix('openai/')])
        sent_s = time.monotonic()
        store.send("lead", name, f"wake {index}")
        _wait(lambda seen=seen: len(llm.request_times[model.removeprefix('openai/')]) > seen,
              "the teammate's model request")
        latencies.append((llm.request_times[model.removeprefix('openai/')][seen] - sent_s) * 1000)
    return latencies


def noop_latencies_ms(conn: redis.Redis, count: int) -> list[float]:
    """Enqueue to start of a bare no-op job on the same worker (RQ's own per-job cost)."""
    queue = Queue(QUEUE, connection=conn)
    latencies = []
    for _ in range(count):
        enqueued = datetime.now(UTC)
        job = queue.enqueue(NOOP_JOB)
        _wait(lambda job=job: job.get_status(refresh=True) == "finished", "the no-op job")
        job.refresh()
        started = job.started_at.replace(tzinfo=UTC)
        latencies.append((started - enqueued).total_seconds() * 1000)
    return latencies


def idle_cost(store: TeamStore, conn: redis.Redis, llm: ScriptedLLM, model: str) -> tuple[int, int]:
    """Jobs enqueued and model requests made while IDLE_MATES teammates sit idle."""
    for n in range(IDLE_MATES):
        store.spawn(f"idle{n}", role="idle", prompt="Rest.", model=model,
                    api_base=llm.api_base, queue=QUEUE)
    _wait(lambda: all(m.status is MateStatus.IDLE for m in store.mates()), "every mate idle")
    queue = Queue(QUEUE, connection=conn)
    # A turn ends (idle) just before its job does: let the last jobs finish first.
    _wait(lambda: queue.count == 0 and queue.started_job_registry.count == 0, "jobs to finish")
    jobs_before = queue.finished_job_registry.count + queue.count
    requests_before = len(llm.request_times[model.removeprefix('openai/')])
    time.sleep(IDLE_WATCH_S)  # the measurement window itself: nothing should happen in it
    jobs = queue.finished_job_registry.count + queue.count - jobs_before
    return jobs, len(llm.request_times[model.removeprefix('openai/')]) - requests_before


def main() -> int:
    llm = ScriptedLLM()
    llm.start()
    try:
        with tempfile.TemporaryDirectory() as tmp, throwaway_redis(Path(tmp)) as url, \
                worker(worker_command(url, [QUEUE]), Path(tmp) / "worker.log", url):
            conn = redis.Redis.from_url(url)
            store = TeamStore(redis.Redis.from_url(url, decode_responses=True), "bench")
            model = llm.script("bob", ["ok"], repeat_last=True)
            store.spawn("bob", role="bench", prompt="Answer ok.", model=model,
                        api_base=llm.api_base, queue=QUEUE)
            wakes = wake_latencies_ms(store, llm, model, "bob")
            noops = noop_latencies_ms(conn, WAKES)
            idle = llm.script("idle", ["resting"], repeat_last=True)
            jobs, requests = idle_cost(store, conn, llm, idle)
    finally:
        llm.stop()
    return report(wakes, noops, jobs, requests)


def report(wakes: list[float], noops: list[float], jobs: int, requests: int) -> int:
    p50, p95 = statistics.median(wakes), percentile(wakes, 0.95)
    base = statistics.median(noops)
    print(f"wake latency, {WAKES} sends to an idle teammate (send -> its model request):")
    print(f"  teammate wake: p50 {p50:7.1f} ms  p95 {p95:7.1f} ms")
    print(f"  no-op RQ job:  p50 {base:7.1f} ms  p95 {percentile(noops, 0.95):7.1f} ms"
          " (enqueue -> start, same worker)")
    verdicts = {f"p50 <= {GOAL_P50_MS:.0f} ms": p50 <= GOAL_P50_MS,
                f"p95 <= {GOAL_P95_MS:.0f} ms": p95 <= GOAL_P95_MS,
                f"p50 <= {GOAL_RATIO:.0f}x baseline ({p50 / base:.2f}x)": p50 <= GOAL_RATIO * base}
    print(f"idle cost, {IDLE_MATES} idle teammates for {IDLE_WATCH_S:.0f} s: "
          f"{jobs} jobs, {requests} model requests (goal 0, 0)")
    verdicts["idle: 0 jobs, 0 requests"] = jobs == 0 and requests == 0
    for goal, met in verdicts.items():
        print(f"  {goal}: {'ok' if met else 'MISSED'}")
    return 0 if verdicts["idle: 0 jobs, 0 requests"] else 1


if __name__ == "__main__":
    sys.exit(main())
