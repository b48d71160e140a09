"""Workspace benchmark: what keeping a workspace in Redis adds to a tool call (its sync before and
after) against the same write_file call on a local workspace, with 0 and 500 other files in the
workspace, and what fetching a 500-file workspace costs an attempt at its start.

Run: .venv/bin/python -m bench.bench_workspace [--repeats N]
Starts its own redis-server (appendonly off) on a free port and stops it by pid.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

import redis
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.keys import RunKeys
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import WorkspaceFiles
from teamctl.shared.workspace.tools import add_workspace_tools

from bench import private_redis
from bench.figures import BenchFigure, print_figures

FILE_BYTES = 2000


@dataclass(frozen=True)
class Sizes:
    """How much each figure does: FULL for the report, SMOKE to show the benchmark runs."""

    calls: int
    other_files: tuple[int, int]
    """Files beside the written ones, in the small and the large workspace."""
    repeats: int


FULL = Sizes(calls=200, other_files=(0, 500), repeats=3)
SMOKE = Sizes(calls=5, other_files=(0, 5), repeats=1)


def write_calls_us(tools: Toolbox, calls: int) -> float:
    """Microseconds per write_file call (a 2 KB file, one of 20 paths in turn)."""
    started = time.perf_counter()
    for i in range(calls):
        result = tools.call(
            "write_file",
            json.dumps({"path": f"out/f{i % 20}.txt", "content": f"{i}" + "x" * FILE_BYTES}),
        )
        assert '"ok": true' in result, result
    return (time.perf_counter() - started) / calls * 1e6


def local_us(others: int, calls: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    try:
        for i in range(others):
            (root / f"other{i}.txt").write_bytes(b"y" * FILE_BYTES)
        tools = Toolbox()
        add_workspace_tools(tools, Workspace(root), ["write_file"])
        return write_calls_us(tools, calls)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def seeded(conn: redis.Redis, others: int) -> WorkspaceFiles:
    """A run's workspace in Redis holding `others` files."""
    files = WorkspaceFiles(conn, RunKeys(f"w-{uuid.uuid4().hex[:8]}"))
    for i in range(others):
        files.save(f"other{i}.txt", 0, b"y" * FILE_BYTES)
    return files


def mirrored_us(files: WorkspaceFiles, calls: int) -> float:
    mirror = WorkspaceMirror.open(files)
    try:
        tools = Toolbox()
        add_workspace_tools(tools, Workspace(mirror.root), ["write_file"])
        mirror.guard(tools, tools.names)
        return write_calls_us(tools, calls)
    finally:
        mirror.close()


def open_ms(files: WorkspaceFiles) -> float:
    """Milliseconds to fetch the whole workspace into a new copy, as an attempt starts."""
    started = time.perf_counter()
    mirror = WorkspaceMirror.open(files)
    elapsed = time.perf_counter() - started
    mirror.close()
    return elapsed * 1000


def collect(sizes: Sizes) -> dict[str, float]:
    """Median of each figure over `sizes.repeats` interleaved runs."""
    runs: dict[str, list[float]] = {}
    with private_redis() as conn:
        for _ in range(sizes.repeats):
            for n in sizes.other_files:
                runs.setdefault(f"local{n}", []).append(local_us(n, sizes.calls))
                files = seeded(conn, n)
                runs.setdefault(f"redis{n}", []).append(mirrored_us(files, sizes.calls))
                runs.setdefault(f"open{n}", []).append(open_ms(files))
    return {name: statistics.median(values) for name, values in runs.items()}


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def run(sizes: Sizes) -> list[BenchFigure]:
    """Per-call cost in Redis against local, at each workspace size; the fetch at start."""
    data = collect(sizes)
    rows = [
        BenchFigure(
            name=f"write_file, workspace in Redis, {n} other files",
            value=data[f"redis{n}"],
            unit="us",
            baseline=data[f"local{n}"],
            baseline_name="same call, local workspace",
            note="pull + push around the call",
        )
        for n in sizes.other_files
    ]
    rows += [
        BenchFigure(
            name=f"fetch a workspace of {n} files ({FILE_BYTES} B each)",
            value=data[f"open{n}"],
            unit="ms",
            note="once per attempt or teammate turn job",
        )
        for n in sizes.other_files
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeats", type=int, default=FULL.repeats, help="runs per figure (median shown)"
    )
    print_figures(run(replace(FULL, repeats=parser.parse_args().repeats)))


if __name__ == "__main__":
    main()
