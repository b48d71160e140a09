"""Start-up benchmark: `teamctl run` with a zero-latency scripted model and a
2-task chain, as a user shaping a team runs it again and again.

- Cold: `teamctl run --workers 2` (the run starts its own workers) until the planner's model
  request arrives, and until the run exits.
- Warm: two preloaded workers already listen (`--workers 0`): the same two figures.
- Baseline, in the same run: the start time of `rq --help` and of `python -c pass`.
- Memory: RSS of a `teamctl run` process while it waits for plan approval, and of an idle
  preloaded worker (VmRSS in /proc/PID/status); the local pool's memory, the sum of the PSS
  (/proc/PID/smaps_rollup) of 8 idle pool workers and the preloaded parent they were forked from
  (`teamctl workers start -n 8` on the embedded defaults), against one idle worker's PSS.
- Short verbs, each against `rq --help` in the same run: `teamctl --help`, `teamctl status RUN`
  on a finished run, `teamctl runs` with 300 runs stored, and `teamctl team task add` on the
  embedded defaults (a team that exists, its local pool already running).

Run: .venv/bin/python -m bench.bench_startup [--cold | --verbs | --memory]  (the cold figures
alone, with the CPU time of the run's processes; the short verbs alone; or the memory figures
alone)
It starts its own redis-server, model server and workers, and stops each by its pid.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.coordinator.local_workers.pool import WorkerPool
from teamctl.coordinator.local_workers.processes import stop_process
from teamctl.coordinator.runs.run import RunRequest, create_run
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.fork_server_client import FORK_SERVER_ENV
from teamctl.shared.redis.embedded import EmbeddedRedis, throwaway_redis
from teamctl.shared.runs.run_config import ModelChoice
from teamctl.shared.runs.store import RunStore
from teamctl.shared.team_file import load_team_file

from bench import failed
from bench.bench_worker import pss_mb, registered_pids, rss_mb, wait_for_flag, worker_fleet
from bench.figures import BenchFigure, print_figures
from tests.support.llm import ScriptedLLM

RUN_TIMEOUT_S = 180.0
PLAN = {
    "tasks": [
        {"id": "first", "memberId": "m1", "task": "Collect facts"},
        {"id": "second", "memberId": "m2", "task": "Write it up", "dependsOn": ["first"]},
    ]
}
GOALS_S = {"cold request": 3.0, "warm request": 0.5, "warm run": 1.5}
"""The start-up goals: planner's request <= 3 s cold, <= 0.5 s warm; a whole warm run <= 1.5 s."""
POOL_MEMORY_GOAL_RATIO = 2.0
"""The pool's idle workers, with their parent, hold at most 2x one worker's PSS."""
VERB_GOAL_RATIO = 1.5
"""Each short verb answers within 1.5x the start of `rq --help`, measured in the same run."""


@dataclass(frozen=True)
class Sizes:
    """How much the benchmark does: FULL for the report, SMOKE to show it runs."""

    cold_runs: int
    warm_runs: int
    baseline_runs: int
    verb_runs: int
    stored_runs: int
    """Runs stored before `teamctl runs` is timed."""
    workers: int
    """The cold runs' `--workers`, and the preloaded workers the warm runs find."""
    pool_workers: int
    """The idle local pool whose memory is measured."""
    fork_workers: bool = False
    """Fork the workers from a fork server, when one is named (bench_worker.worker)."""


FULL = Sizes(
    cold_runs=5,
    warm_runs=5,
    baseline_runs=5,
    verb_runs=9,
    stored_runs=300,
    workers=2,
    pool_workers=8,
)
SMOKE = Sizes(
    cold_runs=1,
    warm_runs=1,
    baseline_runs=1,
    verb_runs=1,
    stored_runs=3,
    workers=1,
    pool_workers=1,
    fork_workers=True,
)


def verb_names(stored_runs: int) -> dict[str, str]:
    """Each short verb's key -> its name in the report."""
    return {
        "help": "`teamctl --help`",
        "status": "`teamctl status RUN` (a finished run)",
        "runs": f"`teamctl runs` ({stored_runs} runs stored)",
        "task add": "`teamctl team task add` (embedded Redis, pool running)",
    }


def teamctl() -> list[str]:
    """The `teamctl` a user runs: the venv's console script beside this Python."""
    script = Path(sys.executable).parent / "teamctl"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()"]


def write_team(path: Path, llm: ScriptedLLM, tag: str, approval: bool = False) -> tuple[Path, str]:
    """A two-member team whose planner returns the 2-task chain; and the planner's model name."""
    planner = llm.script(f"plan-{tag}", [json.dumps(PLAN)], repeat_last=True)
    member = llm.script(f"member-{tag}", ["done"], repeat_last=True)
    synth = llm.script(f"synth-{tag}", ["the answer"], repeat_last=True)
    lines = [
        'team_id = "bench"',
        f'model = "{member}"',
        f'planner = {{ model = "{planner}" }}',
        f'synthesizer = {{ model = "{synth}" }}',
        "[[members]]",
        'id = "m1"',
        "[[members]]",
        'id = "m2"',
    ]
    if approval:
        lines += ["[options]", "require_plan_approval = true"]
    path.write_text("\n".join(lines) + "\n")
    return path, planner.removeprefix("openai/")


def timed_run(llm: ScriptedLLM, url: str, tmp: Path, tag: str, workers: int) -> tuple[float, float]:
    """(seconds to the planner's request, seconds to exit) of one `teamctl run`."""
    request_s, run_s, _ = timed_run_cpu(llm, url, tmp, tag, workers)
    return request_s, run_s


def timed_run_cpu(
    llm: ScriptedLLM, url: str, tmp: Path, tag: str, workers: int
) -> tuple[float, float, float]:
    """timed_run's two figures, and the CPU seconds of the run's processes (the command, the
    workers' parent and the workers, each reaped by its parent: RUSAGE_CHILDREN)."""
    team, planner = write_team(tmp / f"{tag}.toml", llm, tag)
    with (tmp / f"{tag}.log").open("wb") as log:
        cpu_before = _children_cpu_s()
        started = time.monotonic()
        done = subprocess.run(
            [
                *teamctl(),
                "run",
                "Ship it",
                "--team",
                str(team),
                "--api-base",
                llm.api_base,
                "--redis-url",
                url,
                "--workers",
                str(workers),
                "--run-id",
                tag,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        ended = time.monotonic()
        cpu_s = _children_cpu_s() - cpu_before
    if done.returncode != 0:
        raise failed(f"teamctl run {tag} exited {done.returncode}", tmp / f"{tag}.log")
    return llm.request_times[planner][0] - started, ended - started, cpu_s


def _children_cpu_s() -> float:
    """User and system CPU seconds of this process's children reaped so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def start_s(command: list[str], runs: int) -> float:
    """Median wall seconds of a command that starts and exits at once, over `runs` starts."""
    times = []
    for _ in range(runs):
        started = time.monotonic()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def verb_env(**extra: str) -> dict[str, str]:
    """The environment the short verbs and their baseline run in: a user's, so Python caches
    bytecode (with PYTHONDONTWRITEBYTECODE every start would recompile teamctl's sources, while
    rq's come compiled at install)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "REDIS_URL")}
    return {**env, **extra}


def store_runs(url: str, count: int, tmp: Path) -> None:
    """`count` finished runs of the default team, as `teamctl runs` finds them after a while."""
    conn = redis.Redis.from_url(url, decode_responses=True)
    team = load_team_file(None)
    models = ModelChoice(planner="p", synthesizer="s", member_default="m")
    for n in range(count):
        spec = create_run(
            conn,
            RunRequest(
                objective=f"Objective {n}",
                team=team,
                models=models,
                workspace_root=tmp / "stored",
                run_id=f"stored{n}",
            ),
        )
        keys = RunKeys(spec.run_id)
        conn.hset(
            keys.state,
            mapping={"status": "completed", "rounds": 1, "ended_ms": spec.created_ms + 1500},
        )
        conn.hset(
            keys.usage, mapping={"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.001}
        )


def verb_seconds(url: str, finished_run: str, tmp: Path, sizes: Sizes) -> dict[str, float]:
    """Median wall seconds of each short verb and of `rq --help`, timed in rounds of one start
    each, so a busy moment of the machine weighs on the verbs and the baseline alike."""
    store_runs(url, sizes.stored_runs, tmp)
    env = verb_env()
    with embedded_team(tmp / "embedded") as embedded_env:
        commands = {
            "rq --help": ([sys.executable, "-m", "rq.cli", "--help"], env),
            "help": ([*teamctl(), "--help"], env),
            "status": ([*teamctl(), "status", finished_run, "--redis-url", url], env),
            "runs": ([*teamctl(), "runs", "--redis-url", url], env),
            "task add": ([*teamctl(), "team", "task", "add", "one more"], embedded_env),
        }
        for command, command_env in commands.values():  # untimed: writes missing .pyc files
            _start(command, command_env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(sizes.verb_runs):
            for name, (command, command_env) in commands.items():
                times[name].append(_start(command, command_env))
    return {name: statistics.median(values) for name, values in times.items()}


def _start(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one command that starts and exits at once."""
    started = time.monotonic()
    subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, env=env
    )
    return time.monotonic() - started


@contextmanager
def embedded_team(state: Path) -> Iterator[dict[str, str]]:
    """The environment of a user on the embedded defaults in `state`, once a team exists there
    and the local pool its first task started has registered; the pool and the embedded Redis
    are stopped by pid after."""
    env = verb_env(TEAMCTL_STATE_DIR=str(state))
    try:
        subprocess.run(
            [*teamctl(), "team", "create"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        subprocess.run(
            [*teamctl(), "team", "task", "add", "warm up"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = EmbeddedRedis(state / "redis").ensure()
        pool = {w.pid for w in WorkerPool(state / "pool", state / "logs").live()}
        wait_for_flag(lambda: pool and pool <= registered_pids(url), "the local pool to register")
        yield env
    finally:
        WorkerPool(state / "pool", state / "logs").stop()
        EmbeddedRedis(state / "redis").stop()


def pool_pss_mb(count: int, state: Path, forked: bool) -> tuple[float, int]:
    """The sum of the PSS of `count` idle local pool workers and of the preloaded parents they
    were forked from, started by `teamctl workers start` on the embedded defaults in `state`
    (teamctl's own parent, unless `forked` and a fork server is named: bench_worker.worker);
    and how many processes that is. The pool and the embedded Redis are stopped by pid after."""
    env = verb_env(TEAMCTL_STATE_DIR=str(state))
    if not forked:
        env.pop(FORK_SERVER_ENV, None)
    pool = WorkerPool(state / "pool", state / "logs")
    try:
        subprocess.run(
            [*teamctl(), "workers", "start", "-n", str(count)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        url = EmbeddedRedis(state / "redis").ensure()
        workers = {w.pid for w in pool.live()}
        wait_for_flag(lambda: workers <= registered_pids(url), "the local pool to register")
        processes = [*workers, *(parent.pid for parent in pool.parents())]
        return sum(pss_mb(pid) for pid in processes), len(processes)
    finally:
        pool.stop()
        EmbeddedRedis(state / "redis").stop()


def coordinator_rss_mb(llm: ScriptedLLM, url: str, tmp: Path) -> float:
    """RSS of a `teamctl run` process while it waits for plan approval (workers already up)."""
    team, _ = write_team(tmp / "rss.toml", llm, "rss", approval=True)
    conn = redis.Redis.from_url(url, decode_responses=True)
    store = RunStore(conn, RunKeys("rss"))
    with (tmp / "rss.log").open("wb") as log:
        process = subprocess.Popen(
            [
                *teamctl(),
                "run",
                "Ship it",
                "--team",
                str(team),
                "--api-base",
                llm.api_base,
                "--redis-url",
                url,
                "--workers",
                "0",
                "--run-id",
                "rss",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
    try:
        wait_for_flag(
            lambda: store.exists() and store.state().status == "awaiting_approval",
            "the run to wait for approval",
        )
        return rss_mb(process.pid)
    finally:
        stop_process(process, timeout_s=30)


def collect(sizes: Sizes) -> dict[str, float]:
    """Every figure, in seconds or MiB; runs interleave nothing (each is alone on the machine)."""
    llm = ScriptedLLM()
    llm.start()
    try:
        with tempfile.TemporaryDirectory() as tmp_dir, throwaway_redis() as url:
            tmp = Path(tmp_dir)
            cold, loads = [], []
            for n in range(sizes.cold_runs):
                loads.append(os.getloadavg()[0])
                cold.append(timed_run(llm, url, tmp, f"cold{n}", workers=sizes.workers))
            with worker_fleet(url, sizes.workers, tmp, forked=sizes.fork_workers) as processes:
                warm = [
                    timed_run(llm, url, tmp, f"warm{n}", workers=0) for n in range(sizes.warm_runs)
                ]
                worker_rss = rss_mb(processes[0].pid)
                coordinator_rss = coordinator_rss_mb(llm, url, tmp)
            verbs = verb_seconds(url, "warm0", tmp, sizes)
            memory = memory_figures(tmp / "memory", sizes)
    finally:
        llm.stop()
    return {
        "cold request": statistics.median(c[0] for c in cold),
        "cold run": statistics.median(c[1] for c in cold),
        "cold load": statistics.median(loads),
        "warm request": statistics.median(w[0] for w in warm),
        "warm run": statistics.median(w[1] for w in warm),
        "rq --help": start_s([sys.executable, "-m", "rq.cli", "--help"], sizes.baseline_runs),
        "python -c pass": start_s([sys.executable, "-c", "pass"], sizes.baseline_runs),
        "coordinator rss": coordinator_rss,
        "worker rss": worker_rss,
        **memory,
        **{f"verb {key}": value for key, value in verbs.items()},
    }


def memory_figures(tmp: Path, sizes: Sizes) -> dict[str, float]:
    """One idle worker's PSS (executed, as documented, unless the smoke pass forks it), and the
    local pool's: `pool_workers` idle workers with their preloaded parent."""
    tmp.mkdir(parents=True, exist_ok=True)
    with throwaway_redis() as url, worker_fleet(url, 1, tmp, forked=sizes.fork_workers) as one:
        worker_pss = pss_mb(one[0].pid)
    pool_pss, processes = pool_pss_mb(sizes.pool_workers, tmp / "pool-state", sizes.fork_workers)
    return {"worker pss": worker_pss, "pool pss": pool_pss, "pool processes": processes}


def verb_figures(data: dict[str, float], sizes: Sizes) -> list[BenchFigure]:
    """Each short verb against `rq --help` timed beside it (both with bytecode caching on)."""
    rq_help = data["verb rq --help"]
    return [
        BenchFigure(
            name=name,
            value=data[f"verb {key}"],
            unit="s",
            baseline=rq_help,
            baseline_name="`rq --help`",
            goal=f"ratio <= {VERB_GOAL_RATIO}",
            met=data[f"verb {key}"] <= VERB_GOAL_RATIO * rq_help,
            note=f"median of {sizes.verb_runs}",
        )
        for key, name in verb_names(sizes.stored_runs).items()
    ]


def figures(smoke: bool = False) -> list[BenchFigure]:
    """The report's rows: each start-up figure against `rq --help`; RSS against each other (the
    default sizes, or the smoke pass's)."""
    sizes = SMOKE if smoke else FULL
    data = collect(sizes)
    rq_help = data["rq --help"]
    cold = f"cold (--workers {sizes.workers})"
    cold_note = f"; load average {data['cold load']:.1f} on {os.cpu_count()} CPUs"
    rows = []
    for key, name, runs, note in (
        ("cold request", f"run -> planner's request, {cold}", sizes.cold_runs, cold_note),
        ("warm request", "run -> planner's request, workers running", sizes.warm_runs, ""),
        ("cold run", f"whole 2-task run, {cold}", sizes.cold_runs, cold_note),
        ("warm run", "whole 2-task run, workers running", sizes.warm_runs, ""),
    ):
        goal = GOALS_S.get(key)
        rows.append(
            BenchFigure(
                name=name,
                value=data[key],
                unit="s",
                baseline=rq_help,
                baseline_name="`rq --help`",
                goal=f"<= {goal} s" if goal else "",
                met=data[key] <= goal if goal else None,
                note=f"median of {runs}{note}",
            )
        )
    rows.append(
        BenchFigure(
            name="`python -c pass`",
            value=data["python -c pass"],
            unit="s",
            baseline=rq_help,
            baseline_name="`rq --help`",
        )
    )
    rows.append(
        BenchFigure(
            name="RSS of `teamctl run` waiting for plan approval",
            value=data["coordinator rss"],
            unit="MiB",
            baseline=data["worker rss"],
            baseline_name="idle preloaded worker",
        )
    )
    rows.append(
        BenchFigure(
            name="RSS of an idle preloaded worker",
            value=data["worker rss"],
            unit="MiB",
            note=f"after {sizes.warm_runs} warm runs",
        )
    )
    return rows + pool_memory_figures(data, sizes) + verb_figures(data, sizes)


def pool_memory_figures(data: dict[str, float], sizes: Sizes) -> list[BenchFigure]:
    """The idle local pool's PSS against one idle worker's."""
    return [
        BenchFigure(
            name=f"PSS of {sizes.pool_workers} idle local pool workers and their parent",
            value=data["pool pss"],
            unit="MiB",
            baseline=data["worker pss"],
            baseline_name="one idle preloaded worker's PSS",
            goal=f"ratio <= {POOL_MEMORY_GOAL_RATIO:g}",
            met=data["pool pss"] <= POOL_MEMORY_GOAL_RATIO * data["worker pss"],
            note=f"{int(data['pool processes'])} processes, sum of Pss in smaps_rollup",
        )
    ]


def memory_only() -> list[BenchFigure]:
    """The memory figures alone (`--memory`)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        return pool_memory_figures(memory_figures(Path(tmp_dir), FULL), FULL)


def verbs_only() -> list[BenchFigure]:
    """The short verbs alone (`--verbs`): `status` reads one of the stored runs instead of a
    run the team made."""
    with tempfile.TemporaryDirectory() as tmp_dir, throwaway_redis() as url:
        verbs = verb_seconds(url, "stored0", Path(tmp_dir), FULL)
    return verb_figures({f"verb {key}": value for key, value in verbs.items()}, FULL)


def cold_only() -> list[BenchFigure]:
    """The cold figures alone (`--cold`), with the median CPU time of the run's processes."""
    llm = ScriptedLLM()
    llm.start()
    try:
        with tempfile.TemporaryDirectory() as tmp_dir, throwaway_redis() as url:
            runs, loads = [], []
            for n in range(FULL.cold_runs):
                loads.append(os.getloadavg()[0])
                runs.append(timed_run_cpu(llm, url, Path(tmp_dir), f"cold{n}", FULL.workers))
    finally:
        llm.stop()
    cpu_s = statistics.median(run[2] for run in runs)
    note = (
        f"median of {FULL.cold_runs}; load average {statistics.median(loads):.1f} on "
        f"{os.cpu_count()} CPUs; {cpu_s:.2f} s of CPU (the run's processes)"
    )
    cold = f"cold (--workers {FULL.workers})"
    request_s = statistics.median(run[0] for run in runs)
    goal = GOALS_S["cold request"]
    return [
        BenchFigure(
            name=f"run -> planner's request, {cold}",
            value=request_s,
            unit="s",
            goal=f"<= {goal} s",
            met=request_s <= goal,
            note=note,
        ),
        BenchFigure(
            name=f"whole 2-task run, {cold}",
            value=statistics.median(run[1] for run in runs),
            unit="s",
            note=note,
        ),
    ]


def main() -> int:
    if "--cold" in sys.argv[1:]:
        return print_figures(cold_only())
    if "--verbs" in sys.argv[1:]:
        return print_figures(verbs_only())
    return print_figures(memory_only() if "--memory" in sys.argv[1:] else figures())


if __name__ == "__main__":
    sys.exit(main())
