"""The benchmark report: runs every benchmark's `figures()`, writes bench/results.md and prints it.

Run: .venv/bin/python -m bench.report [--only board,bus] [--output bench/results.md] [--smoke]
Each benchmark's own output goes to bench/logs/<name>.log (or --log-dir); a benchmark that fails
is reported as such, the others still run, and the exit code is 1. --smoke runs every benchmark
once at a tiny size (`figures(smoke=True)`), to show each runs end to end and renders its table,
and writes bench/logs/smoke.md: its figures mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Protocol

from teamctl.shared.redis.embedded import redis_server_binary

from bench.figures import BenchFigure, BenchSection

BENCH_DIR = Path(__file__).resolve().parent
BENCHES = {
    "startup": "Start-up (`teamctl run`, zero-latency scripted model, 2-task chain)",
    "makespan": "Makespan (seeded random 40-task DAG, 0.2-1.0 s per task, 4 workers)",
    "throughput": "Throughput (2,000 independent zero-latency tasks, 8 workers)",
    "reclaim": "Reclaim (SIGKILLed worker mid-task, heartbeat_ttl_s 3)",
    "worker": "Per-task overhead (one worker, zero-latency scripted model over HTTP, and HTTPS)",
    "task_path": (
        "A member task's path, phase by phase: time and Redis commands (one default worker, "
        "zero-latency scripted model, the server's MONITOR)"
    ),
    "tracing": (
        "Tracing's per-task cost (OTLP/HTTP to a loopback receiver against tracing off, "
        "one preloaded forking worker each)"
    ),
    "teammates": "Persistent teammates (one preloaded forking worker)",
    "mcp": "MCP servers (sessions kept warm per run, one preloaded forking worker)",
    "board": "Task board (private redis-server)",
    "workspace": (
        "Workspace in Redis: a tool call's sync and an attempt's fetch (private redis-server)"
    ),
    "failover": (
        "Fencing across a failover: an epoch in the token against WAIT for a replica "
        "(private primary and replica)"
    ),
    "journal": "Step journal: recording a step, reading back 100 (private redis-server)",
    "bus": "Message bus (private redis-server)",
    "team_board": (
        "Team board at scale (10,000 tasks beside 100 idle teammates, then 400 "
        "hand-outs; private redis-server)"
    ),
    "planned_run": "Planned run at scale (5,000-task wide DAG, 8 workers)",
    "memory": (
        "Redis memory per planned task, bus message and idle teammate, and of a flooded "
        "workspace (private redis-server)"
    ),
    "idle_teammates": "1,000 idle teammates (4 workers, 60 s quiet window)",
    "concurrent_runs": "50 concurrent planned runs (20 tasks each, one Redis, 8 workers)",
    "limits": (
        "Provider limits shared by the fleet: goodput against a 4 req/s provider (3 runs "
        "of 40 tasks, 8 workers) and the cost when no limit applies"
    ),
    "dashboard": (
        "`teamctl dashboard`: Redis commands it adds with 50 live run pages open "
        "(private redis-server)"
    ),
    "fallback": (
        "Fallback models (the primary answers 503 for a minute, then recovers; "
        "litellm over HTTP, private redis-server)"
    ),
    "budget": (
        "A budget that cannot overshoot (8 workers, max_cost_usd for 30 calls, "
        "priced scripted calls)"
    ),
    "soak": "Soak, compressed (30 min of short runs and teammate turns, 4 workers)",
    "router": (
        "litellm's Router: per-call cost beside litellm.completion, and one rpm limit "
        "across two processes on one Redis (scripted server, private redis-server)"
    ),
    "fork": (
        "Replay and fork (a 100-task run replayed, a fork at the last task of a 10-task "
        "chain, `teamctl diff` of two 1,000-task runs; 0.2 s scripted calls, 4 workers)"
    ),
}
"""Module suffix (bench.bench_<name>) -> section title, in report order."""
SMOKE_NOTE = (
    "Smoke pass (`--smoke`): every benchmark once at a tiny size, to show that it runs "
    "end to end and renders its table. The figures are not the benchmarks' and say "
    "nothing about the goals."
)


class Figures(Protocol):
    """A benchmark module's `figures`: its rows, at the full size or at the smoke pass's."""

    def __call__(self, smoke: bool = False) -> list[BenchFigure]: ...


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    redis_version = subprocess.run(
        [redis_server_binary(), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()
    server = next((w.removeprefix("v=") for w in redis_version if w.startswith("v=")), "?")
    return {
        "cores": str(os.cpu_count()),
        "memory": f"{mem_kb / 1024 / 1024:.1f} GiB",
        "Python": platform.python_version(),
        "Redis server": server,
        "litellm": version("litellm"),
        "RQ": version("rq"),
        "OS": f"{platform.system()} {platform.release()}",
    }


def run_section(name: str, title: str, log_dir: Path, smoke: bool = False) -> BenchSection:
    """One benchmark's figures, its own printing sent to a log; an error becomes the section's."""
    started = time.monotonic()
    log_path = log_dir / f"{name}.log"
    with log_path.open("w") as log, contextlib.redirect_stdout(log):
        try:
            module = importlib.import_module(f"bench.bench_{name}")
            measure: Figures = module.figures
            section = BenchSection(title=title, figures=measure(smoke=smoke))
        except Exception as exc:  # noqa: BLE001 - the report goes on and says what failed
            traceback.print_exc(file=log)
            section = BenchSection(title=title, error=f"{type(exc).__name__}: {exc}")
    section.seconds = time.monotonic() - started
    return section


def _number(value: float | None) -> str:
    """A figure with about three significant digits, thousands separated."""
    if value is None:
        return ""
    if float(value).is_integer() and abs(value) < 100:
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def render(
    info: dict[str, str],
    sections: list[BenchSection],
    command: str,
    total_s: float,
    smoke: bool = False,
) -> str:
    """The report as markdown: machine, then one table per benchmark."""
    lines = [
        "# Benchmark results",
        "",
        f"Produced by `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
        f"in {total_s / 60:.1f} min. Every baseline was measured in the same run.",
        "",
    ]
    if smoke:
        lines += [SMOKE_NOTE, ""]
    lines += ["| machine | |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in info.items()]
    for section in sections:
        lines += ["", f"## {section.title}", ""]
        if section.error:
            lines.append(f"FAILED after {section.seconds:.0f} s: {section.error}")
            continue
        lines += [
            "| figure | value | baseline | ratio | goal | met | note |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in section.figures:
            baseline = (
                f"{_number(f.baseline)} {f.unit} ({f.baseline_name})"
                if f.baseline is not None
                else ""
            )
            ratio = f"{f.ratio:.2f}x" if f.ratio is not None else ""
            met = {True: "yes", False: "**MISSED**", None: ""}[f.met]
            lines.append(
                f"| {f.name} | {_number(f.value)} {f.unit} | {baseline} | {ratio} | "
                f"{f.goal} | {met} | {f.note} |"
            )
        lines += ["", f"({section.seconds:.0f} s)"]
        lines += section.notes
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated benchmarks (default: all)")
    parser.add_argument(
        "--output",
        type=Path,
        help="the report (default: bench/results.md, with --smoke bench/logs/smoke.md)",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=BENCH_DIR / "logs",
        help="each benchmark's own output, <name>.log (default: bench/logs)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="each benchmark once at a tiny size: shows it runs, not its figures",
    )
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(BENCHES)
    unknown = set(names) - set(BENCHES)
    if unknown:
        print(
            f"unknown benchmark(s) {sorted(unknown)}: choose from {list(BENCHES)}", file=sys.stderr
        )
        return 2
    log_dir: Path = args.log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    # A smoke pass never overwrites the measured results.
    output: Path = args.output or (
        BENCH_DIR / "logs" / "smoke.md" if args.smoke else BENCH_DIR / "results.md"
    )
    started = time.monotonic()
    info = machine()
    sections = []
    for name in names:
        print(f"== {name} ...", file=sys.stderr, flush=True)
        sections.append(run_section(name, BENCHES[name], log_dir, args.smoke))
    command = (
        "scripts/bench"
        + (" --smoke" if args.smoke else "")
        + (f" --only {args.only}" if args.only else "")
    )
    text = render(info, sections, command, time.monotonic() - started, args.smoke)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(text)
    return 1 if any(s.error for s in sections) else 0


if __name__ == "__main__":
    sys.exit(main())
