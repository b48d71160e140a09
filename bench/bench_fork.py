"""Replay and fork: what `teamctl replay` and `teamctl fork` pay, and what `teamctl diff` of two
large runs costs.

Figures:
  a. The replay of a run of `--replay-tasks` independent tasks (each a step that calls a Python
     tool, then an answer; scripted calls of `--latency-s`): model requests and tool runs during
     the replay (goal 0 each: the tool appends a line to a file), its wall time against the
     source run's and against the same run with zero-latency calls.
  b. A fork at the last task of a `--chain-tasks` chain (t1 -> t2 -> ...) with a new member model:
     model calls the fork makes (goal: the last task's two steps and the synthesis) against the
     source run's (all of them), its tool runs, the calls `teamctl diff` says it reused, and its
     wall time against the source's.
  c. `teamctl diff` of two ended `--diff-tasks`-task runs stored on the board (every fourth output
     differs by a line), as text and as --json: wall time (goal < 2 s) against `teamctl --help`.

Run: .venv/bin/python -m bench.bench_fork [--smoke] (from the repository's root: the workers
import the counting tool from tests/pytools_fixture).
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.agent.replies import Usage
from teamctl.shared.keys import RunKeys
from teamctl.shared.lease import Lease
from teamctl.shared.redis.embedded import throwaway_redis
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.text import printable

from bench import failed
from bench.bench_planned_run import cli_s
from bench.bench_startup import teamctl
from bench.bench_worker import make_run, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.teamfile import team_file

REPO = Path(__file__).resolve().parent.parent
TOOL = "tests.pytools_fixture.tools:count_step"
"""Appends a line to the file it is given: a line per real run of the tool."""
RUN_TIMEOUT_S = 1800.0
GOAL_DIFF_S = 2.0
DIFF_REPEATS = 3
FORK_EXPECTED = {"planner": 0, "member": 0, "synth": 1, "new member": 2}
"""A fork at a chain's last task pays for that task's two steps on the new model and the
synthesis, nothing else."""
CLAIM_TTL_S = 600.0
ERROR_CHARS = 160
"""Of a failed replay's error, in its figure's note."""
OUTPUT_LINES = 8
"""Lines of each stored task output in the diff figure (a few hundred characters)."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    replay_tasks: int
    chain_tasks: int
    diff_tasks: int
    workers: int
    latency_s: float
    """Every scripted call's latency in the runs that are not the zero-latency baseline."""
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(replay_tasks=100, chain_tasks=10, diff_tasks=1000, workers=4, latency_s=0.2)
SMOKE = Sizes(
    replay_tasks=4, chain_tasks=3, diff_tasks=40, workers=1, latency_s=0.05, fork_workers=True
)


class Member:
    """A member's scripted model: its first step calls the counting tool, its second answers
    naming the task (so a kept output can be told from one made again)."""

    def __init__(self, tag: str, log: Path) -> None:
        self.tag = tag
        self.log = log

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        if not any(m["role"] == "assistant" for m in body["messages"]):
            return ToolCalls([("count_step", {"path": str(self.log), "step": 1})])
        return f"{self.tag} did {task_id_of(body)}"


def task_id_of(body: dict[str, Any]) -> str:
    """The task a member request is about, from its dispatch input (the first user message)."""
    dispatch = next(m["content"] for m in body["messages"] if m["role"] == "user")
    found = re.search(r"^Task ID: (\S+)", dispatch, re.M)
    if found is None:
        raise ValueError("no `Task ID:` line in the member's first user message")
    return found.group(1)


class Bench:
    """The scripted server, the Redis the runs share, and a folder for teams, logs and tool
    lines."""

    def __init__(self, llm: ScriptedLLM, url: str, tmp: Path) -> None:
        self.llm = llm
        self.url = url
        self.tmp = tmp
        self.tool_log = tmp / "tool.log"

    def team(self, name: str, plan: list[dict[str, object]], latency_s: float) -> Path:
        """A one-member team (m1, with the counting tool) whose planner returns `plan`."""
        models = {
            "planner": self.llm.script(
                f"plan-{name}",
                [json.dumps({"tasks": plan})],
                repeat_last=True,
                latency_s=latency_s,
            ),
            "member": self.llm.script(
                f"m1-{name}", handler=Member("m1", self.tool_log), latency_s=latency_s
            ),
            "synth": self.llm.script(
                f"synth-{name}", ["the synthesis"], repeat_last=True, latency_s=latency_s
            ),
        }
        return team_file(
            self.tmp / f"{name}.toml",
            models,
            members=[{"id": "m1", "tools": [TOOL]}],
            options={
                "enable_member_team_tools": False,
                "max_concurrency": 2 * len(plan),
                "max_rounds": 10_000,
            },
        )

    def requests(self) -> int:
        """Every request the scripted server received, to any model."""
        return sum(len(bodies) for bodies in self.llm.requests.values())

    def requests_to(self, model: str) -> int:
        return len(self.llm.requests.get(model.removeprefix("openai/"), []))

    def tool_runs(self) -> int:
        return len(self.tool_log.read_text().splitlines()) if self.tool_log.exists() else 0

    def teamctl(
        self, name: str, *args: str, may_fail: bool = False
    ) -> tuple[float, dict[str, Any]]:
        """(wall seconds, the run's result as `--json` gives it) of one `teamctl ... --workers 0
        --json` making run `name` on the bench's Redis, run from the repository's root (where
        the tool imports from). With `may_fail`, a run that ended failed (exit 1) is read back
        with `teamctl status` instead: a run that fails in its coordinator prints no result."""
        out_path, log_path = self.tmp / f"{name}.json", self.tmp / f"{name}.log"
        with out_path.open("wb") as out, log_path.open("wb") as log:
            started = time.perf_counter()
            done = subprocess.run(
                [*teamctl(), *args, "--redis-url", self.url, "--workers", "0", "--json"],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=log,
                cwd=REPO,
                env=repo_env(),
                timeout=RUN_TIMEOUT_S,
                check=False,
            )
            elapsed = time.perf_counter() - started
        if done.returncode == 1 and may_fail:
            return elapsed, self.cli_json("status", name)
        if done.returncode != 0:
            raise failed(f"teamctl {args[0]} ({name}) exited {done.returncode}", log_path)
        return elapsed, json.loads(out_path.read_text())

    def run(self, name: str, team: Path) -> tuple[float, dict[str, Any]]:
        return self.teamctl(
            name, "run", "Make the thing", "--team", str(team),
            "--api-base", self.llm.api_base, "--run-id", name,
        )  # fmt: skip

    def cli_json(self, *args: str) -> dict[str, Any]:
        """A read-only `teamctl ... --json` on the bench's Redis, parsed (`status` of a failed
        run exits 1, as the run did)."""
        done = subprocess.run(
            [*teamctl(), *args, "--redis-url", self.url, "--json"],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        if done.returncode not in (0, 1) or not done.stdout.strip():
            raise RuntimeError(f"teamctl {args[0]} exited {done.returncode}: {done.stderr[-500:]}")
        parsed: dict[str, Any] = json.loads(done.stdout)
        return parsed


def repo_env() -> dict[str, str]:
    """The environment with the repository first on PYTHONPATH: a `teamctl` script appends the
    working directory to sys.path, after site-packages, where a dependency's own `tests`
    package would shadow the repository's."""
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (f"{os.pathsep}{path}" if path else "")}


def outputs(out: dict[str, Any]) -> dict[str, str]:
    return {r["task_id"]: r["output"] for r in out["member_results"]}


def independent(tasks: int) -> list[dict[str, object]]:
    """A plan of `tasks` tasks that depend on nothing: the workers run them side by side."""
    return [{"id": f"t{n}", "memberId": "m1", "task": f"step {n}"} for n in range(1, tasks + 1)]


def chain(tasks: int) -> list[dict[str, object]]:
    """t1 -> t2 -> ...: a fork at the last task keeps every other task's output."""
    return [
        {
            "id": f"t{n}",
            "memberId": "m1",
            "task": f"step {n}",
            "dependsOn": [f"t{n - 1}"] if n > 1 else [],
        }
        for n in range(1, tasks + 1)
    ]


@dataclass(frozen=True)
class ReplayMeasured:
    """The zero-latency run, the source run and its replay: times, requests, tool runs."""

    zero_s: float
    source_s: float
    replay_s: float
    source_requests: int
    replay_requests: int
    source_tools: int
    replay_tools: int
    differing: int
    """Task outputs (and the synthesis) of the replay that are not its source's."""
    status: str
    error: str
    """Why the replay failed, if it did (`diverged at ...`)."""


def measure_replay(bench: Bench, sizes: Sizes) -> ReplayMeasured:
    """A zero-latency run, the same run with latency (the source), then the source's replay."""
    plan = independent(sizes.replay_tasks)
    zero_s, _ = bench.run("zero", bench.team("zero", plan, 0.0))
    asked, ran = bench.requests(), bench.tool_runs()
    source_s, source = bench.run("source", bench.team("source", plan, sizes.latency_s))
    source_requests, source_tools = bench.requests() - asked, bench.tool_runs() - ran
    asked, ran = bench.requests(), bench.tool_runs()
    replay_s, replay = bench.teamctl(
        "source-r", "replay", "source", "--run-id", "source-r", may_fail=True
    )
    made = outputs(replay)
    return ReplayMeasured(
        zero_s=zero_s,
        source_s=source_s,
        replay_s=replay_s,
        source_requests=source_requests,
        replay_requests=bench.requests() - asked,
        source_tools=source_tools,
        replay_tools=bench.tool_runs() - ran,
        differing=sum(made.get(t) != o for t, o in outputs(source).items())
        + (replay["output"] != source["output"]),
        status=replay["status"],
        error=replay.get("error") or "",
    )


@dataclass(frozen=True)
class ForkMeasured:
    """The chain run and its fork at the last task: times, requests, tool runs, reuse."""

    source_s: float
    fork_s: float
    source_requests: int
    fork_requests: dict[str, int]
    """Requests the fork made, by model: the source's planner, member and synthesizer, and the
    new member model."""
    fork_tools: int
    outputs_as_expected: bool
    """The tasks before the fork point kept the source's outputs, the last one is the new
    model's."""
    reused_calls: int
    """`teamctl diff SOURCE FORK --json`'s b.reused_calls."""


def measure_fork(bench: Bench, sizes: Sizes) -> ForkMeasured:
    """A chain run (the source), then a fork at its last task with a new member model."""
    last = f"t{sizes.chain_tasks}"
    team = bench.team("chain", chain(sizes.chain_tasks), sizes.latency_s)
    asked = bench.requests()
    source_s, source = bench.run("chain", team)
    source_requests = bench.requests() - asked
    new_model = bench.llm.script(
        "m1-new", handler=Member("m1new", bench.tool_log), latency_s=sizes.latency_s
    )
    models = {"planner": "plan-chain", "member": "m1-chain", "synth": "synth-chain"}
    before = {role: bench.requests_to(model) for role, model in models.items()}
    ran = bench.tool_runs()
    fork_s, fork = bench.teamctl(
        "chain-f", "fork", "chain", "--at", last, "--member-model", f"m1={new_model}",
        "--run-id", "chain-f",
    )  # fmt: skip
    made = {role: bench.requests_to(model) - before[role] for role, model in models.items()}
    kept = {t: o for t, o in outputs(source).items() if t != last}
    return ForkMeasured(
        source_s=source_s,
        fork_s=fork_s,
        source_requests=source_requests,
        fork_requests={**made, "new member": bench.requests_to(new_model)},
        fork_tools=bench.tool_runs() - ran,
        outputs_as_expected=outputs(fork) == {**kept, last: f"m1new did {last}"},
        reused_calls=bench.cli_json("diff", "chain", "chain-f")["b"]["reused_calls"],
    )


def stored_output(task_id: str, changed: bool) -> str:
    """A task's output of OUTPUT_LINES lines; `changed` changes its middle line."""
    lines = [f"{task_id}: finding {n} of the task, with a sentence of detail" for n in range(8)]
    if changed:
        lines[OUTPUT_LINES // 2] = f"{task_id}: a finding the other run worded differently"
    return "\n".join(lines) + "\n"


def store_ended_run(conn: redis.Redis, run_id: str, tmp: Path, tasks: int, side_b: bool) -> None:
    """An ended run whose tasks each were claimed, charged and completed on the real board, as
    its workers would leave them (run B: every fourth output differs from run A's)."""
    make_run(conn, run_id, "mock/m", "http://127.0.0.1:9", tasks, tmp / run_id)
    run = RunHandle.existing(conn, run_id)
    for n in range(tasks):
        task_id = f"t{n}"
        token = run.board.claim(task_id, "m1", "bench:1", CLAIM_TTL_S)
        if token is None:
            raise RuntimeError(f"could not claim {task_id} of {run_id}")
        run.budget.charge(Usage(prompt_tokens=100 + n % 7, completion_tokens=40), task_id)
        run.board.complete(task_id, token, stored_output(task_id, side_b and n % 4 == 0), 10)
    # Ended as its coordinator ends it: through the store that holds the run's lease.
    lease = Lease(conn, RunKeys(run_id), ttl_s=CLAIM_TTL_S)
    if not lease.try_acquire():
        raise RuntimeError(f"run {run_id} already has a coordinator")
    RunStore(conn, RunKeys(run_id), lease.owner).finish(
        RunEnd(status=RunStatus.COMPLETED, retention_s=3600, output="the answer")
    )


def measure_diff(bench: Bench, sizes: Sizes) -> dict[str, float]:
    """`teamctl diff A B`, as text and as --json, on two stored runs; `teamctl --help` beside."""
    conn = redis.Redis.from_url(bench.url, decode_responses=True)
    store_ended_run(conn, "diff-a", bench.tmp, sizes.diff_tasks, side_b=False)
    store_ended_run(conn, "diff-b", bench.tmp, sizes.diff_tasks, side_b=True)
    compared = bench.cli_json("diff", "diff-a", "diff-b")
    differing = sum(t["same_output"] is False for t in compared["tasks"])
    if differing != len(range(0, sizes.diff_tasks, 4)):
        raise RuntimeError(f"teamctl diff --json found {differing} differing outputs")
    timed = {
        "help": [cli_s(bench.url, "--help") for _ in range(DIFF_REPEATS)],
        "text": [cli_s(bench.url, "diff", "diff-a", "diff-b") for _ in range(DIFF_REPEATS)],
        "json": [
            cli_s(bench.url, "diff", "diff-a", "diff-b", "--json") for _ in range(DIFF_REPEATS)
        ],
    }
    data = {f"{k}_s": statistics.median(w for w, _ in v) for k, v in timed.items()}
    data |= {f"{k}_cpu_s": statistics.median(c for _, c in v) for k, v in timed.items()}
    return {**data, "differing": differing}


@dataclass(frozen=True)
class Measured:
    """Each scenario's figures, before they become rows."""

    replay: ReplayMeasured
    fork: ForkMeasured
    diff: dict[str, float]


def collect(sizes: Sizes) -> Measured:
    if Path.cwd().resolve() != REPO:
        raise RuntimeError(f"run from {REPO}: the workers import the counting tool from there")
    llm = ScriptedLLM()
    llm.start()
    try:
        with (
            tempfile.TemporaryDirectory(prefix="bench-fork-") as tmp_dir,
            throwaway_redis(Path(tmp_dir)) as url,
        ):
            bench = Bench(llm, url, Path(tmp_dir))
            with worker_fleet(url, sizes.workers, bench.tmp, forked=sizes.fork_workers):
                replay = measure_replay(bench, sizes)
                fork = measure_fork(bench, sizes)
            diff = measure_diff(bench, sizes)
        if llm.mistakes:
            raise RuntimeError(f"requests the scripts did not foresee: {llm.mistakes[:3]}")
        return Measured(replay, fork, diff)
    finally:
        llm.stop()


def replay_rows(r: ReplayMeasured, sizes: Sizes) -> list[BenchFigure]:
    label = f"{sizes.replay_tasks} tasks, {sizes.workers} workers"
    source = f"the source run ({sizes.latency_s} s calls)"
    return [
        BenchFigure(
            name=f"model requests during the replay ({label})",
            value=r.replay_requests,
            unit="requests",
            baseline=r.source_requests,
            baseline_name="the source run's",
            goal="0",
            met=r.replay_requests == 0,
        ),
        BenchFigure(
            name="tool runs during the replay",
            value=r.replay_tools,
            unit="runs",
            baseline=r.source_tools,
            baseline_name="the source run's",
            goal="0",
            met=r.replay_tools == 0,
            note="the tool appends a line to a file",
        ),
        BenchFigure(
            name="outputs of the replay that differ from the source's",
            value=r.differing,
            unit="outputs",
            goal="0",
            met=r.differing == 0 and r.status == "completed",
            note=f"every task's and the synthesis; the replay {r.status}"
            + (f": {printable(r.error)[:ERROR_CHARS]}" if r.error else ""),
        ),
        BenchFigure(
            name="replay wall time",
            value=r.replay_s,
            unit="s",
            baseline=r.source_s,
            baseline_name=source,
            goal="ratio < 1",
            met=r.replay_s < r.source_s,
            note="`teamctl replay` start to exit",
        ),
        BenchFigure(
            name="replay wall time, against zero-latency calls",
            value=r.replay_s,
            unit="s",
            baseline=r.zero_s,
            baseline_name="the same run, 0 s calls",
            note="what replaying costs beside running with instant calls",
        ),
    ]


def fork_rows(f: ForkMeasured, sizes: Sizes) -> list[BenchFigure]:
    last = f"t{sizes.chain_tasks}"
    made = ", ".join(f"{role} {n}" for role, n in f.fork_requests.items())
    return [
        BenchFigure(
            name=f"model calls of a fork at {last} of a {sizes.chain_tasks}-task chain",
            value=sum(f.fork_requests.values()),
            unit="calls",
            baseline=f.source_requests,
            baseline_name="a fresh run of the team",
            goal=f"{sum(FORK_EXPECTED.values())}: {last}'s 2 steps + the synthesis",
            met=f.fork_requests == FORK_EXPECTED,
            note=f"by model: {made}",
        ),
        BenchFigure(
            name="tool runs of the fork",
            value=f.fork_tools,
            unit="runs",
            goal=f"1 ({last}'s)",
            met=f.fork_tools == 1,
        ),
        BenchFigure(
            name="calls the fork reused (`teamctl diff --json` b.reused_calls)",
            value=f.reused_calls,
            unit="calls",
            goal=f"{1 + 2 * (sizes.chain_tasks - 1)}: the plan + 2 per kept task",
            met=f.reused_calls == 1 + 2 * (sizes.chain_tasks - 1),
            note="outputs kept as the source's, " + ("yes" if f.outputs_as_expected else "**NO**"),
        ),
        BenchFigure(
            name="fork wall time",
            value=f.fork_s,
            unit="s",
            baseline=f.source_s,
            baseline_name=f"the source run ({sizes.latency_s} s calls)",
            note="`teamctl fork` start to exit",
        ),
    ]


def diff_rows(d: dict[str, float], sizes: Sizes) -> list[BenchFigure]:
    label = f"two {sizes.diff_tasks:,}-task runs, {d['differing']:.0f} outputs differ"
    return [
        BenchFigure(
            name=f"`teamctl diff A B`{form} ({label})",
            value=d[f"{key}_s"],
            unit="s",
            baseline=d["help_s"],
            baseline_name="`teamctl --help`",
            goal=f"< {GOAL_DIFF_S:.0f} s",
            met=d[f"{key}_s"] < GOAL_DIFF_S,
            note=f"median of {DIFF_REPEATS}; {d[f'{key}_cpu_s']:.2f} s CPU",
        )
        for key, form in (("text", ""), ("json", " --json"))
    ]


def run(sizes: Sizes) -> list[BenchFigure]:
    data = collect(sizes)
    return [
        *replay_rows(data.replay, sizes),
        *fork_rows(data.fork, sizes),
        *diff_rows(data.diff, sizes),
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's section (scripts/bench): the default sizes, or the smoke pass's."""
    return run(SMOKE if smoke else FULL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: shows it runs")
    parser.add_argument("--replay-tasks", type=int, default=FULL.replay_tasks)
    parser.add_argument("--chain-tasks", type=int, default=FULL.chain_tasks)
    parser.add_argument("--diff-tasks", type=int, default=FULL.diff_tasks)
    parser.add_argument("--workers", type=int, default=FULL.workers)
    parser.add_argument("--latency-s", type=float, default=FULL.latency_s)
    args = parser.parse_args(argv)
    if args.smoke:
        return print_figures(run(SMOKE))
    sizes = Sizes(
        replay_tasks=args.replay_tasks,
        chain_tasks=args.chain_tasks,
        diff_tasks=args.diff_tasks,
        workers=args.workers,
        latency_s=args.latency_s,
    )
    return print_figures(run(sizes))


if __name__ == "__main__":
    sys.exit(main())
