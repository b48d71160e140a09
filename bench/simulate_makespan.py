"""What the makespan benchmark's DAG allows, by simulation: the seeded 40-task DAG of
bench_makespan list-scheduled on its 4 workers with no overhead and with a fixed overhead per
task, ready tasks taken in plan order (as the coordinator does) or by critical path (longest
chain of tasks below, by count, or by latency, which the coordinator cannot know).

Run: .venv/bin/python -m bench.simulate_makespan
Pure Python, no servers: it shows how much of the measured ratio is the per-task overhead.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable

from bench.bench_makespan import FULL, SEED, lower_bound_s, random_dag

OVERHEADS_S = (0.0, 0.02, 0.05, 0.09)
"""Per-task overheads to simulate; 0.09 s is about what a task cost beyond its model latency
on a preloaded forking worker in bench_worker (queued run_task minus zero model latency)."""
Priority = Callable[[int], tuple[float, int]]


def simulate_s(
    deps: list[list[int]], latency: list[float], priority: Priority, overhead_s: float
) -> float:
    """Makespan of list scheduling on the benchmark's workers: whenever a worker is free, the
    ready task with the lowest priority key starts and takes its latency plus `overhead_s`."""
    children: list[list[int]] = [[] for _ in deps]
    for task, parents in enumerate(deps):
        for parent in parents:
            children[parent].append(task)
    waiting = [len(parents) for parents in deps]
    ready = [task for task, count in enumerate(waiting) if count == 0]
    running: list[tuple[float, int]] = []
    now = 0.0
    while ready or running:
        ready.sort(key=priority)
        while ready and len(running) < FULL.workers:
            task = ready.pop(0)
            heapq.heappush(running, (now + latency[task] + overhead_s, task))
        now, done = heapq.heappop(running)
        for child in children[done]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return now


def chain_below(deps: list[list[int]], weight: Callable[[int], float]) -> list[float]:
    """Each task's longest chain to the end of the DAG, itself included, by `weight`."""
    below = [0.0] * len(deps)
    children: list[list[int]] = [[] for _ in deps]
    for task, parents in enumerate(deps):
        for parent in parents:
            children[parent].append(task)
    for task in reversed(range(len(deps))):  # plan order is a topological order
        below[task] = weight(task) + max((below[c] for c in children[task]), default=0.0)
    return below


def _depends_on(task: dict[str, object]) -> list[str]:
    depends_on = task["dependsOn"]
    assert isinstance(depends_on, list)
    return [str(d) for d in depends_on]


def main() -> int:
    tasks, latency_by_id = random_dag(SEED, FULL)
    bound = max(lower_bound_s(tasks, latency_by_id, FULL.workers))
    deps = [[int(d[1:]) for d in _depends_on(task)] for task in tasks]
    latency = [latency_by_id[f"t{n}"] for n in range(len(tasks))]
    by_count = chain_below(deps, lambda _: 1.0)
    by_latency = chain_below(deps, lambda n: latency[n])
    orders: dict[str, Priority] = {
        "plan order": lambda n: (0.0, n),
        "critical path (task count)": lambda n: (-by_count[n], n),
        "critical path (latency)": lambda n: (-by_latency[n], n),
    }
    print(f"seed {SEED}, {len(tasks)} tasks on {FULL.workers} workers, lower bound {bound:.2f} s")
    print("| order | " + " | ".join(f"{o * 1000:.0f} ms/task" for o in OVERHEADS_S) + " |")
    print("|---|" + "---|" * len(OVERHEADS_S))
    for name, priority in orders.items():
        ratios = [simulate_s(deps, latency, priority, o) / bound for o in OVERHEADS_S]
        print(f"| {name} | " + " | ".join(f"{r:.3f}x" for r in ratios) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
