"""A budget that cannot overshoot: one planned run of `--tasks` tasks on `--workers` preloaded
workers, every member step a priced call (gpt-4o-mini at litellm's local prices, served by the
scripted model with some latency, so every worker has a call in flight), and a `max_cost_usd`
that covers `--calls` such calls. Each reply reports an output near the model's maximum, so a
call costs about the worst case the reservation holds for it and the budget is spent by calls,
not by reservations alone. The run pauses (awaiting_budget) once the budget cannot cover
another call; the benchmark then reads what was spent and cancels it.

Figures: the spend at the end against the budget (goal: not above it) and the priced calls made
against the calls the budget covers (goal: not more). Both goals need the call reservation
(each call's worst case reserved before it is made); with the charge after the call alone, a
run overshoots by up to one call per worker in flight, which this measures as well.

Run: .venv/bin/python -m bench.bench_budget [--workers K] [--calls N] [--tasks T]
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.shared.agent.llm import load_litellm
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.store import RunStore

from bench import failed
from bench.bench_startup import teamctl
from bench.bench_worker import wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM, ToolCalls, Used

PRICED = "gpt-4o-mini"
PROMPT_TOKENS, COMPLETION_TOKENS = 11, 16_000
"""What every scripted reply reports as its usage (gpt-4o-mini writes 16,384 at most)."""
CALL_LATENCY_S = 0.2
"""Each member call's latency: long enough for every worker to have one in flight."""
RUN_ID = "bench-budget"


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    workers: int
    calls: int
    """The calls max_cost_usd covers."""
    tasks: int
    fork_workers: bool = False


FULL = Sizes(workers=8, calls=30, tasks=16)
SMOKE = Sizes(workers=1, calls=3, tasks=2, fork_workers=True)


def call_cost_usd() -> float:
    """What one scripted call to the priced model costs at litellm's local prices."""
    price = load_litellm().model_cost[PRICED]
    return float(
        PROMPT_TOKENS * price["input_cost_per_token"]
        + COMPLETION_TOKENS * price["output_cost_per_token"]
    )


def write_team(path: Path, llm: ScriptedLLM, tasks: int, budget_usd: float, workers: int) -> Path:
    """A one-member team whose `tasks` independent tasks keep calling a tool, a priced call a
    step, until the budget stops them."""
    plan = [{"id": f"t{n}", "memberId": "m1", "task": f"task {n}"} for n in range(tasks)]
    step = Used(ToolCalls([("team_list_tasks", {})]), PROMPT_TOKENS, COMPLETION_TOKENS)
    member = llm.script(PRICED, [step], repeat_last=True, latency_s=CALL_LATENCY_S)
    path.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script("plan", [json.dumps(plan)])}" }}',
                f'synthesizer = {{ model = "{llm.script("synth", [], repeat_last=True)}" }}',
                f'model = "{member}"',
                "[[members]]",
                'id = "m1"',
                "[options]",
                f"max_cost_usd = {budget_usd!r}",
                f"max_concurrency = {workers}",
                "member_max_steps = 100000",
                "max_rounds = 1000",
            ]
        )
        + "\n"
    )
    return path


def spend_until_paused(llm: ScriptedLLM, url: str, team: Path, tmp: Path) -> float:
    """`teamctl run` until it pauses on its budget (then cancelled); the cost it recorded."""
    log_path = tmp / "run.log"
    store = RunStore(redis.Redis.from_url(url, decode_responses=True), RunKeys(RUN_ID))
    with log_path.open("wb") as log:
        run = subprocess.Popen(
            [
                *teamctl(),
                "run",
                "Spend it",
                "--team",
                str(team),
                "--api-base",
                llm.api_base,
                "--redis-url",
                url,
                "--workers",
                "0",
                "--run-id",
                RUN_ID,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            wait_for_flag(
                lambda: store.exists() and store.state().status == "awaiting_budget",
                "the run to pause on its budget",
            )
            # Paused: every member gives its task back at its next call; wait for those.
            wait_for_flag(
                lambda: store.conn.scard(RunKeys(RUN_ID).running) == 0, "every claim given back"
            )
            cost = store.usage().cost_usd
            subprocess.run(
                [*teamctl(), "cancel", RUN_ID, "--redis-url", url],
                check=True,
                capture_output=True,
                timeout=60,
            )
            if run.wait(timeout=120) != 1:
                raise failed("the cancelled run did not exit 1", log_path)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait(30)
    return cost


def run(sizes: Sizes) -> list[BenchFigure]:
    cost = call_cost_usd()
    budget_usd = sizes.calls * cost
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-budget-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
            worker_fleet(url, sizes.workers, Path(tmp_dir), forked=sizes.fork_workers),
        ):
            tmp = Path(tmp_dir)
            team = write_team(tmp / "team.toml", llm, sizes.tasks, budget_usd, sizes.workers)
            started = time.perf_counter()
            spent_usd = spend_until_paused(llm, url, team, tmp)
            wall_s = time.perf_counter() - started
            calls = len(llm.requests[PRICED])
    finally:
        llm.stop()
    label = f"{sizes.workers} workers, max_cost_usd for {sizes.calls} calls"
    return [
        BenchFigure(
            name=f"spend at the end ({label})",
            value=spent_usd * 1e6,
            unit="micro-USD",
            baseline=budget_usd * 1e6,
            baseline_name="max_cost_usd",
            goal="<= budget",
            met=spent_usd <= budget_usd * (1 + 1e-9),
            note="needs the call reservation; without it up to one call per worker in flight over",
        ),
        BenchFigure(
            name="priced calls made",
            value=calls,
            unit="calls",
            baseline=sizes.calls,
            baseline_name="calls the budget covers",
            goal="<= covered",
            met=calls <= sizes.calls,
            note=f"{CALL_LATENCY_S:g} s a call; the run paused, then was cancelled",
        ),
        BenchFigure(name="wall, start to pause and cancel", value=wall_s, unit="s", note="context"),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=FULL.workers)
    parser.add_argument("--calls", type=int, default=FULL.calls)
    parser.add_argument("--tasks", type=int, default=FULL.tasks)
    args = parser.parse_args(argv)
    return print_figures(run(Sizes(workers=args.workers, calls=args.calls, tasks=args.tasks)))


if __name__ == "__main__":
    sys.exit(main())
