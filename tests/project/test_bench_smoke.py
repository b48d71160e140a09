"""The benchmarks' smoke pass: every benchmark in bench.report's list runs end to end at its tiny
size (`python -m bench.report --smoke --only NAME`) and renders its section, so a benchmark that
no longer runs fails the suite instead of the next full report. Its figures are not checked: at
that size they say nothing about the goals. The workers the smoke sizes start are forked from the
suite's fork server ($TEAMCTL_WORKER_FORK_SERVER, set by conftest), as `teamctl run`'s are."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import BENCHES

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench"
DEADLINE_S = 300.0
"""One benchmark's smoke run takes 1-10 s here with the fork server, a minute without it."""
TABLE_HEADER = "| figure | value | baseline | ratio | goal | met | note |"
TABLE_RULE = "|---|---|---|---|---|---|---|"
TAIL_LINES = 60


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a file, or a line that says it was not written."""
    if not path.exists():
        return f"({path.name} was not written)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def section(report: str, title: str) -> list[str]:
    """The lines of the report's section headed `title`, up to the next heading (empty when
    there is no such section)."""
    lines = report.splitlines()
    heading = f"## {title}"
    if heading not in lines:
        return []
    start = lines.index(heading) + 1
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("#")), len(lines))
    return lines[start:end]


def run_smoke(name: str, tmp_path: Path) -> tuple[int, str, str]:
    """(exit code, report, what to show on failure) of one benchmark's smoke run; its process
    group is killed if it outlives DEADLINE_S, so no server it started is left behind."""
    output, logs = tmp_path / "smoke.md", tmp_path / "logs"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.report",
            "--smoke",
            "--only",
            name,
            "--output",
            str(output),
            "--log-dir",
            str(logs),
        ],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        printed, _ = process.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        printed, _ = process.communicate()
        printed += f"\n(killed after {DEADLINE_S:.0f} s)".encode()
    report = output.read_text() if output.exists() else ""
    shown = (
        f"--- its output:\n{printed.decode(errors='replace')[-3000:]}\n"
        f"--- the end of logs/{name}.log:\n{tail(logs / f'{name}.log')}"
    )
    return process.returncode, report, shown


@pytest.mark.parametrize("name", list(BENCHES))
def test_benchmark_runs_and_renders_its_table(name: str, tmp_path: Path) -> None:
    code, report, shown = run_smoke(name, tmp_path)
    assert code == 0, f"bench.report --smoke --only {name} exited {code}\n{shown}"
    failures = [line for line in report.splitlines() if line.startswith("FAILED")]
    assert not failures, f"{failures}\n{shown}"
    lines = section(report, BENCHES[name])
    assert lines, f"no section headed {BENCHES[name]!r} in the report:\n{report}\n{shown}"
    assert TABLE_HEADER in lines and TABLE_RULE in lines, "\n".join(lines)
    rows = lines[lines.index(TABLE_RULE) + 1 :]
    figures = [row for row in rows if row.startswith("| ") and row.endswith(" |")]
    assert figures, f"the {name} table has no figure:\n" + "\n".join(lines)


def test_every_benchmark_module_is_in_the_report() -> None:
    """A bench_*.py module left out of bench.report's list would run neither in `scripts/bench`
    nor in the smoke pass. The tools beside them (probe_tls, simulate_makespan) are not named
    bench_*: they print their own tables and measure nothing the report holds."""
    modules = {path.stem.removeprefix("bench_") for path in BENCH_DIR.glob("bench_*.py")}
    assert modules == set(BENCHES), (
        f"not in BENCHES: {sorted(modules - set(BENCHES))}; "
        f"no module: {sorted(set(BENCHES) - modules)}"
    )


def test_every_module_in_bench_imports() -> None:
    """The tools too: a renamed import breaks them as it broke the benchmarks."""
    for path in sorted(BENCH_DIR.glob("*.py")):
        importlib.import_module(f"bench.{path.stem}".removesuffix(".__init__"))


def test_simulate_makespan_prints_its_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.simulate_makespan"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("seed 13, 40 tasks on 4 workers, lower bound "), done.stdout
    assert "| plan order | " in done.stdout, done.stdout
