"""Bus benchmark: read_unread latency with 100 vs 100,000 messages on the bus, and publish rate
against raw redis-py XADD, measured in the same run on a private redis-server.

Run: .venv/bin/python -m bench.bench_bus
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from teamctl.shared.bus import MessageBus
from teamctl.shared.keys import RunKeys
from teamctl.shared.roster import write_roster

from bench import private_redis
from bench.figures import BenchFigure

MEMBERS = ["reader", "writer", "other"]
FILL_PIPELINE = 1000
RATIO_GOAL = 1.5
STARTUP_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    bus_sizes: tuple[int, int]
    """Messages on the bus for the small and the large read."""
    reads: int
    publishes: int
    rounds: int


FULL = Sizes(bus_sizes=(100, 100_000), reads=2000, publishes=5000, rounds=3)
SMOKE = Sizes(bus_sizes=(10, 100), reads=20, publishes=50, rounds=1)


def roster_bus(conn: redis.Redis, run_id: str, member_ids: list[str], **options: Any) -> MessageBus:
    """A bus of a run with no spec, its roster written first (as creating a run writes it)."""
    keys = RunKeys(run_id)
    write_roster(conn, keys, member_ids)
    return MessageBus(conn, keys, **options)


def fill(bus: MessageBus, count: int) -> None:
    """`count` messages through the publish script, pipelined: a third each to the reader, to
    another member, and to everyone; then both catch up, as live members would."""
    pipe = bus.conn.pipeline(transaction=False)
    recipients = {"reader": ["reader"], "other": ["other"], "*": ["reader", "other"]}
    version = bus.roster().version
    for n in range(count):
        to = ("reader", "other", "*")[n % 3]
        inboxes = [bus.keys.inbox(m) for m in recipients[to]]
        bus.scripts["publish"](
            keys=[bus.keys.bus, bus.keys.bus_seq, bus.keys.roster_ver, *inboxes],
            args=["writer", to, "peer.message", "", f"filler {n}", version],
            client=pipe,
        )
        if len(pipe) >= FILL_PIPELINE:
            pipe.execute()
    pipe.execute()
    bus.read_unread("reader")
    bus.read_unread("other")


def read_latencies_ms(bus: MessageBus, reads: int) -> list[float]:
    """One new message, then one timed read_unread, `reads` times."""
    latencies = []
    for n in range(reads):
        bus.send("writer", "reader", None, None, f"new {n}")
        started = time.perf_counter()
        got = bus.read_unread("reader")
        latencies.append((time.perf_counter() - started) * 1000)
        assert len(got) == 1
    return latencies


def rates_per_s(actions: dict[str, Callable[[int], object]], sizes: Sizes) -> dict[str, float]:
    """Best of `sizes.rounds` timings of `sizes.publishes` sequential calls, rounds interleaved
    so that load from other processes on the machine hits every contender alike."""
    best = dict.fromkeys(actions, float("inf"))
    for _ in range(sizes.rounds):
        for name, action in actions.items():
            started = time.perf_counter()
            for n in range(sizes.publishes):
                action(n)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: sizes.publishes / seconds for name, seconds in best.items()}


def bench_reads(conn: redis.Redis, sizes: Sizes) -> list[float]:
    """Median read_unread ms at each bus size (printed as it goes)."""
    print(f"read_unread with one new message, {sizes.reads} reads:")
    medians = []
    for size in sizes.bus_sizes:
        # The cap keeps the bus at its size while the reads add messages: trimming runs inside
        # publish (untimed), as it would in a long run whose members keep up.
        bus = roster_bus(conn, f"bench-read-{size}", MEMBERS, bus_maxlen=size)
        fill(bus, size)
        latencies = read_latencies_ms(bus, sizes.reads)
        medians.append(statistics.median(latencies))
        p95 = statistics.quantiles(latencies, n=20)[-1]
        print(
            f"  {conn.xlen(bus.keys.bus):>7} messages on the bus: median {medians[-1]:.3f} ms, "
            f"p95 {p95:.3f} ms"
        )
    ratio = medians[-1] / medians[0]
    verdict = "ok" if ratio <= RATIO_GOAL else "MISSED"
    print(f"  ratio {ratio:.2f} (goal <= {RATIO_GOAL}): {verdict}")
    return medians


def bench_publish(conn: redis.Redis, sizes: Sizes) -> dict[str, float]:
    """Messages per second of each publish path and of raw XADD (printed as it goes)."""
    print(
        f"publish, {sizes.publishes} sequential messages on one connection "
        f"(best of {sizes.rounds}):"
    )
    raw_key = RunKeys("bench-raw").bus
    bus = roster_bus(conn, "bench-publish", MEMBERS, bus_maxlen=10 * sizes.publishes * sizes.rounds)

    def raw(n: int) -> None:
        conn.xadd(
            raw_key,
            {
                "from": "writer",
                "to": "reader",
                "type": "peer.message",
                "task_id": "",
                "content": f"m {n}",
                "created_at": 0,
            },
        )

    rates = rates_per_s(
        {
            "raw redis-py XADD": raw,
            "bus.send (1 inbox)": lambda n: bus.send("writer", "reader", None, None, f"m {n}"),
            "bus.broadcast (2 inboxes)": lambda n: bus.broadcast("writer", None, None, f"m {n}"),
        },
        sizes,
    )
    raw_rate = rates["raw redis-py XADD"]
    for name, rate in rates.items():
        print(f"  {name + ':':<28} {rate:>8,.0f} msg/s ({rate / raw_rate:.2f} of raw)")
    return rates


def collect(sizes: Sizes) -> tuple[list[float], dict[str, float]]:
    """(read medians per bus size, publish rates), printing each as it is measured."""
    with private_redis() as conn:
        return bench_reads(conn, sizes), bench_publish(conn, sizes)


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: a read on a full bus against one on a small bus; publish against XADD."""
    sizes = SMOKE if smoke else FULL
    medians, rates = collect(sizes)
    small, large = sizes.bus_sizes
    ratio = medians[-1] / medians[0]
    rows = [
        BenchFigure(
            name=f"read_unread, {large:,} messages on the bus",
            value=medians[-1],
            unit="ms",
            baseline=medians[0],
            baseline_name=f"same with {small} messages",
            goal=f"ratio <= {RATIO_GOAL}",
            met=ratio <= RATIO_GOAL,
        )
    ]
    raw = rates.pop("raw redis-py XADD")
    rows += [
        BenchFigure(
            name=name, value=rate, unit="msg/s", baseline=raw, baseline_name="raw redis-py XADD"
        )
        for name, rate in rates.items()
    ]
    return rows


def main() -> int:
    medians, _ = collect(FULL)
    return 0 if medians[-1] / medians[0] <= RATIO_GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
