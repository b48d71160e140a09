"""Step journal benchmark: what recording one step costs a member's attempt (its reply and one
tool result, two fenced appends) against a bare EVALSHA round trip, and how long the attempt
after a crash takes to read a 100-step journal back.

Run: .venv/bin/python -m bench.bench_journal [--repeats N]
Starts its own redis-server (appendonly off) on a free port and stops it by pid.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import dataclass, replace

import redis
from teamctl.shared.agent.replies import ModelReply, ToolCall, Usage
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.journal import StepJournal

from bench import bench_board, private_redis
from bench.figures import BenchFigure, print_figures

REPLY = ModelReply(
    content="thinking it through " * 10,
    tool_calls=[ToolCall(id="call_0", name="search", arguments='{"q": "x"}')],
    usage=Usage(prompt_tokens=1200, completion_tokens=80, cost_usd=0.001),
)
RESULT = "a tool result of a few hundred characters " * 8


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    steps: int
    repeats: int
    evalsha_calls: int


FULL = Sizes(steps=100, repeats=5, evalsha_calls=bench_board.FULL.evalsha_calls)
SMOKE = Sizes(steps=5, repeats=1, evalsha_calls=bench_board.SMOKE.evalsha_calls)


def fresh_journal(conn: redis.Redis) -> StepJournal:
    keys = RunKeys(f"j-{uuid.uuid4().hex[:8]}")
    conn.hset(keys.task("t1"), mapping={"task_id": "t1", "token": "1@e", "status": "in_progress"})
    return StepJournal(conn, keys, "t1", "1@e", 100_000_000)


def record_us(conn: redis.Redis, steps: int) -> float:
    """Microseconds to record one step: its reply, then one tool result (over `steps`)."""
    journal = fresh_journal(conn)
    started = time.perf_counter()
    for step in range(1, steps + 1):
        journal.record_reply("m1", step, REPLY)
        journal.record_result("m1", step, "call_0", RESULT)
    return (time.perf_counter() - started) / steps * 1e6


def replay_ms(conn: redis.Redis, steps: int) -> float:
    """Milliseconds to read a journal of `steps` steps back as the next attempt's steps."""
    journal = fresh_journal(conn)
    for step in range(1, steps + 1):
        journal.record_reply("m1", step, REPLY)
        journal.record_result("m1", step, "call_0", RESULT)
    started = time.perf_counter()
    replayed = journal.steps_for("m1", crashed=True)
    elapsed = time.perf_counter() - started
    assert len(replayed) == steps
    return elapsed * 1000


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def run(sizes: Sizes) -> list[BenchFigure]:
    """Per-step recording against a bare round trip; the read-back of a journal."""
    runs: dict[str, list[float]] = {}
    with private_redis() as conn:
        for _ in range(sizes.repeats):
            runs.setdefault("evalsha", []).append(
                bench_board.bare_evalsha_us(conn, sizes.evalsha_calls)
            )
            runs.setdefault("record", []).append(record_us(conn, sizes.steps))
            runs.setdefault("replay", []).append(replay_ms(conn, sizes.steps))
    data = {name: statistics.median(values) for name, values in runs.items()}
    return [
        BenchFigure(
            name="record one step (reply + one tool result)",
            value=data["record"],
            unit="us",
            baseline=data["evalsha"],
            baseline_name="bare EVALSHA round trip",
            note="2 fenced appends; a model call takes seconds",
        ),
        BenchFigure(
            name=f"read back a {sizes.steps}-step journal",
            value=data["replay"],
            unit="ms",
            note="once, when the attempt after a crash starts",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=FULL.repeats, help="runs per figure (median shown)"
    )
    print_figures(run(replace(FULL, repeats=parser.parse_args().repeats)))


if __name__ == "__main__":
    main()
