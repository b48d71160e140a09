"""Fallback benchmark: the primary model answers 503 for a while (a minute at full size), then
recovers. Calls go back to back through a FallbackCaller (the one members, teammates, the lead
and the planner use) over real HTTP through litellm, with the defaults: `model_max_retries` 3
with teamctl's backoff, `fallback_cooldown_s` 30 in a private Redis.

- Every call of the outage is answered (by the fallback): the goal is all of them.
- Extra latency per call during the outage, against calls to a healthy primary in the same run:
  the cooldown skips the primary after its retries were spent once, so most calls pay one Redis
  read; the calls that probe it again pay its retries.
- The same outage without the cooldown (`fallback_cooldown_s` 0): every call pays the retries.
- How long after the primary recovers calls are back on it (at most one cooldown and a probe).

Run: .venv/bin/python -m bench.bench_fallback
It starts its own redis-server and model server and stops each by its pid.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from teamctl.shared.agent.fallbacks import Cooldowns, FallbackCaller
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.model_names import DEFAULT_FALLBACK_COOLDOWN_S

from bench import private_redis
from bench.figures import BenchFigure, print_figures
from tests.support.llm import HttpError, ScriptedLLM

REPLY_LATENCY_S = 0.05
"""Each reply's time at the server, a fast model's: calls are not free, as a provider's are not."""
WARM_UP_CALLS = 3


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    outage_s: float
    cooldown_s: float
    healthy_calls: int
    uncooled_calls: int
    """Calls timed during an outage without the cooldown (each pays the retries)."""
    after_calls: int
    """Calls after the primary recovered (the first back on it ends the figure)."""


FULL = Sizes(
    outage_s=60.0,
    cooldown_s=DEFAULT_FALLBACK_COOLDOWN_S,
    healthy_calls=50,
    uncooled_calls=8,
    after_calls=5,
)
SMOKE = Sizes(outage_s=2.0, cooldown_s=0.5, healthy_calls=5, uncooled_calls=1, after_calls=2)


class Outage:
    """The primary's handler: 503 until `end` (monotonic), then an answer."""

    def __init__(self) -> None:
        self.end = 0.0
        self.lock = threading.Lock()

    def start(self, seconds: float) -> None:
        with self.lock:
            self.end = time.monotonic() + seconds

    def stop(self) -> None:
        with self.lock:
            self.end = 0.0

    def __call__(self, body: dict[str, Any]) -> str | HttpError:
        with self.lock:
            down = time.monotonic() < self.end
        return HttpError(503, "overloaded") if down else "from the primary"


@dataclass
class Call:
    """One timed call: when it ended, how long it took, which model answered."""

    ended: float
    seconds: float
    model: str | None


def timed(ask: Callable[[], str | None]) -> Call:
    started = time.monotonic()
    model = ask()
    ended = time.monotonic()
    return Call(ended, ended - started, model)


def collect(sizes: Sizes) -> dict[str, float]:
    """The raw figures of one run of the benchmark."""
    llm = ScriptedLLM()
    llm.start()
    outage = Outage()
    try:
        primary = llm.script("primary", handler=outage, latency_s=REPLY_LATENCY_S)
        backup = llm.script(
            "backup", ["from the backup"], repeat_last=True, latency_s=REPLY_LATENCY_S
        )
        with private_redis() as conn:
            return _measure(conn, llm, outage, primary, backup, sizes)
    finally:
        llm.stop()


def _measure(
    conn: redis.Redis, llm: ScriptedLLM, outage: Outage, primary: str, backup: str, sizes: Sizes
) -> dict[str, float]:
    client = LitellmClient(provider_keys=())  # teamctl's defaults: 3 retries, 0.5 s doubling

    def asker(cooldown_s: float) -> Callable[[], str | None]:
        caller = FallbackCaller(client, [backup], 10.0, Cooldowns(conn, cooldown_s))
        return lambda: (
            caller.complete(
                primary, [{"role": "user", "content": "hi"}], api_base=llm.api_base
            ).model
        )

    cooled, uncooled = asker(sizes.cooldown_s), asker(0.0)
    for _ in range(WARM_UP_CALLS):  # litellm's import and first calls are not the figure's
        cooled()
    healthy = [timed(cooled) for _ in range(sizes.healthy_calls)]
    outage.start(sizes.outage_s)
    during: list[Call] = []
    while time.monotonic() < outage.end:
        during.append(timed(cooled))
    recovered_at = time.monotonic()
    after: list[Call] = []
    while len(after) < sizes.after_calls or after[-1].model != primary:
        after.append(timed(cooled))
    outage.start(3600.0)
    without = [timed(uncooled) for _ in range(sizes.uncooled_calls)]
    outage.stop()
    healthy_s = statistics.median(c.seconds for c in healthy)
    back = next(c for c in after if c.model == primary)
    return {
        "healthy_s": healthy_s,
        "calls": len(during),
        "answered": sum(c.model in (primary, backup) for c in during),
        "by_fallback": sum(c.model == backup for c in during),
        "during_s": statistics.mean(c.seconds for c in during),
        "during_median_s": statistics.median(c.seconds for c in during),
        "probes": sum(c.seconds > 10 * healthy_s for c in during),
        "uncooled_s": statistics.mean(c.seconds for c in without),
        "back_after_s": back.ended - recovered_at,
    }


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def run(sizes: Sizes) -> list[BenchFigure]:
    data = collect(sizes)
    healthy_ms = data["healthy_s"] * 1000
    base = "a call to the healthy primary"
    back_goal = sizes.cooldown_s + 10.0
    return [
        BenchFigure(
            name=f"calls answered during a {sizes.outage_s:g} s outage",
            unit="%",
            value=100 * data["answered"] / data["calls"],
            goal="100 %",
            met=data["answered"] == data["calls"],
            note=f"{data['calls']:g} calls, {data['by_fallback']:g} by the fallback",
        ),
        BenchFigure(
            name="extra latency per call during the outage, with the cooldown",
            value=data["during_s"] * 1000 - healthy_ms,
            unit="ms",
            baseline=healthy_ms,
            baseline_name=base,
            note=(
                f"median call {data['during_median_s'] * 1000:.0f} ms; "
                f"{data['probes']:g} calls probed the primary and paid its retries "
                f"(cooldown {sizes.cooldown_s:g} s)"
            ),
        ),
        BenchFigure(
            name="extra latency per call during the outage, without the cooldown",
            value=data["uncooled_s"] * 1000 - healthy_ms,
            unit="ms",
            baseline=healthy_ms,
            baseline_name=base,
            note="fallback_cooldown_s 0: every call pays the primary's 3 retries",
        ),
        BenchFigure(
            name="back on the primary after it recovered",
            value=data["back_after_s"],
            unit="s",
            goal=f"<= {back_goal:g} s (cooldown + a probe)",
            met=data["back_after_s"] <= back_goal,
        ),
    ]


def main() -> None:
    print_figures(run(FULL))


if __name__ == "__main__":
    main()
