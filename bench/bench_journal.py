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

import redis
from teamctl.shared.agent.replies import ModelReply, ToolCall, Usage
from teamctl.shared.keys import RunKeys
from teamctl.shared.runs.journal import StepJournal

from bench import private_redis
from bench.bench_board import bare_evalsha_us
from bench.figures import BenchFigure, print_figures

STEPS = 100
REPLY = ModelReply(content="thinking it through " * 10,
                   tool_calls=[ToolCall(id="call_0", name="search", arguments='{"q": "x"}')],
                   usage=Usage(prompt_tokens=1200, completion_tokens=80, cost_usd=0.001))
RESULT = "a tool result of a few hundred characters " * 8


def fresh_journal(conn: redis.Redis) -> StepJournal:
    keys = RunKeys(f"j-{uuid.uuid4().hex[:8]}")
    conn.hset(keys.task("t1"), mapping={"task_id": "t1", "token": "1@e",
                                        "status": "in_progress"})
    return StepJournal(conn, keys, "t1", "1@e", 100_000_000)


def record_us(conn: redis.Redis) -> float:
    """Microseconds to record one step: its reply, then one tool result."""
    journal = fresh_journal(conn)
    started = time.perf_counter()
    for step in range(1, STEPS + 1):
        journal.record_reply("m1", step, REPLY)
        journal.record_result("m1", step, "call_0", RESULT)
    return (time.perf_counter() - started) / STEPS * 1e6


def replay_ms(conn: redis.Redis) -> float:
    """Milliseconds to read a 100-step journal back as the next attempt's steps."""
    journal = fresh_journal(conn)
    for step in range(1, STEPS + 1):
        journal.record_reply("m1", step, REPLY)
        journal.record_result("m1", step, "call_0", RESULT)
    started = time.perf_counter()
    steps = journal.steps_for("m1", crashed=True)
    elapsed = time.perf_counter() - started
    assert len(steps) == STEPS
    return elapsed * 1000


def figures(repeats: int = 5) -> list[BenchFigure]:
    """Per-step recording against a bare round trip; the read-back of a 100-step journal."""
    runs: dict[str, list[float]] = {}
    with private_redis() as conn:
        for _ in range(repeats):
            runs.setdefault("evalsha", []).append(bare_evalsha_us(conn))
            runs.setdefault("record", []).append(record_us(conn))
            runs.setdefault("replay", []).append(replay_ms(conn))
    data = {name: statistics.median(values) for name, values in runs.items()}
    return [BenchFigure(name="record one step (reply + one tool result)", value=data["record"],
                        unit="us", baseline=data["evalsha"],
                        baseline_name="bare EVALSHA round trip",
                        note="2 fenced appends; a model call takes seconds"),
            BenchFigure(name=f"read back a {STEPS}-step journal", value=data["replay"],
                        unit="ms", note="once, when the attempt after a crash starts")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median shown)")
    print_figures(figures(parser.parse_args().repeats))


if __name__ == "__main__":
    main()
