"""The warm local pool: started by `teamctl run` on the embedded defaults, reused by the next
run, listed and stopped by `teamctl workers`, replaced when killed, gone by itself when idle."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest
from teamctl.coordinator.local_workers.pool import PoolWorker, WorkerPool
from teamctl.coordinator.runs.launch import WorkerPlan
from teamctl.shared.agent.offline_model import MODEL as OFFLINE_MODEL
from teamctl.shared.process.pids import executable, process_start_ticks
from teamctl.shared.redis.embedded import EmbeddedRedis, free_port
from teamctl.shared.settings import load_settings

from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.replies import script_run
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until
from tests.support.workers import exited

STARTED_LINE = "2 local pool workers on members"
SPAWNER_KEY = "sk-test-only-the-spawner-has-it-0123"


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The test's state dir; its pool and its embedded Redis are stopped by pid at the end."""
    root = tmp_path / "state"
    yield root
    WorkerPool(root / "pool", root / "logs").stop()
    EmbeddedRedis(root / "redis").stop()


def teamctl(
    *args: str, timeout_s: float = 120, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, as a user runs it (its pool outlives it), with `env`
    added to this environment."""
    return subprocess.run(
        [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
        cwd=cwd,
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def pool_pids(state: Path) -> set[int]:
    """The live pool workers recorded in the state dir."""
    return {w.pid for w in WorkerPool(state / "pool", state / "logs").live()}


def run_offline(cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """A plain `teamctl run` on the embedded defaults with the offline model; must complete."""
    done = teamctl(
        "run", "Plan a picnic", "--approve-plan", "--model", OFFLINE_MODEL, cwd=cwd, **env
    )
    assert done.returncode == 0, done.stderr
    return done


def test_run_starts_the_pool_the_next_run_reuses_it_and_workers_stop_ends_it(state: Path) -> None:
    first = run_offline()
    assert sum(STARTED_LINE in line for line in first.stderr.splitlines()) == 1, first.stderr
    # A cold start says it waits for the workers it started, never that none listens.
    assert "no worker listens" not in first.stderr
    pids = pool_pids(state)
    assert len(pids) == 2
    # Workspaces and logs hold what models wrote and workers logged: their owner's alone.
    workspaces, logs = state / "workspaces", state / "logs"
    assert {mode(p) for p in (state, workspaces, logs, *workspaces.iterdir())} == {0o700}
    assert {mode(p) for p in logs.iterdir()} == {0o600}

    second = run_offline()
    assert STARTED_LINE not in second.stderr
    assert pool_pids(state) == pids

    listed = teamctl("workers", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [row for row in json.loads(listed.stdout) if row["pid"] in pids]
    assert len(rows) == 2
    (env_key,) = {w.env_key for w in WorkerPool(state / "pool", state / "logs").live()}
    assert re.fullmatch("[0-9a-f]{8}", env_key)  # started together: one environment
    assert all(
        row["pool"]
        and row["pool_env"] == env_key
        and row["queues"] == ["members"]
        and row["state"] == "idle"
        and row["current_job"] is None
        and row["host"]
        for row in rows
    )
    lines = teamctl("workers").stdout.splitlines()  # piped: tab-separated, no header
    assert len(lines) == 2 and all(
        re.fullmatch(rf"members\t{re.escape(rows[0]['host'])}:\d+\tidle\t-\t{env_key}", line)
        for line in lines
    ), lines
    assert {int(line.split()[1].rpartition(":")[2]) for line in lines} == pids

    stopped = teamctl("workers", "stop")
    assert stopped.returncode == 0 and "stopped 2" in stopped.stdout
    wait_until(lambda: all(exited(pid) for pid in pids), 15, message="the pool to exit")
    assert not (state / "pool" / "workers.json").exists()
    assert "no pool workers" in teamctl("workers", "stop").stdout


def test_a_killed_pool_worker_is_replaced_on_the_next_run(state: Path) -> None:
    started = teamctl("workers", "start", "-n", "2")
    assert started.returncode == 0, started.stderr
    pids = pool_pids(state)
    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: exited(victim), 10, message="the killed worker to die")

    done = run_offline()
    assert "started 1 local pool worker on" in done.stderr, done.stderr
    now = pool_pids(state)
    assert len(now) == 2 and victim not in now and pids - {victim} <= now
    # The killed worker lingers in RQ's registry until its key expires; it is not listed.
    assert victim not in {row["pid"] for row in json.loads(teamctl("workers", "--json").stdout)}


def test_idle_pool_workers_exit_by_themselves(state: Path) -> None:
    started = teamctl("workers", "start", "-n", "1", "--idle-exit", "2")
    assert started.returncode == 0, started.stderr
    (pid,) = pool_pids(state)
    wait_until(lambda: exited(pid), 60, interval_s=0.2, message="the idle worker to exit")
    assert pool_pids(state) == set()


def test_an_external_redis_with_a_listening_worker_gets_no_run_scoped_ones(workers: str) -> None:
    settings = load_settings()
    plain_run = WorkerPlan(count=None, embedded=False, idle_exit_s=600)
    assert plain_run.run_scoped_count(workers, ["members"], settings, print) == 0
    unserved = f"q-{uuid.uuid4().hex[:8]}"
    assert plain_run.run_scoped_count(workers, ["members", unserved], settings, print) == 2
    # An explicit --workers N keeps meaning N run-scoped workers.
    assert WorkerPlan(3, False, 600).run_scoped_count(workers, ["members"], settings, print) == 3
    assert WorkerPlan(0, True, 600).run_scoped_count(workers, ["members"], settings, print) == 0
    assert not (settings.state_dir / "pool" / "workers.json").exists()


def test_workers_errors_are_one_line_with_their_exit_code(state: Path) -> None:
    down = teamctl("workers", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert down.returncode == 1 and len(down.stderr.strip().splitlines()) == 1, down.stderr
    bad_queue = teamctl("workers", "start", "--queue", "a b")
    assert bad_queue.returncode == 2 and bad_queue.stderr.startswith("teamctl: --queue 'a b'")
    bad_count = teamctl("workers", "start", "-n", "0")
    assert bad_count.returncode == 2
    assert pool_pids(state) == set()


def replaced_line(changed: str) -> str:
    return (
        f"teamctl: replacing 2 local pool workers on members started with another {changed} "
        "(each finishes the job in hand) with workers of this environment"
    )


@pytest.mark.exec_workers
def test_a_run_in_another_environment_replaces_the_pool_and_says_what_differs(
    state: Path, tmp_path: Path
) -> None:
    run_offline()
    first = pool_pids(state)

    unrelated = run_offline(SOME_SHELL_VARIABLE="changed")
    assert "replacing" not in unrelated.stderr and pool_pids(state) == first

    keyed = run_offline(OPENAI_API_KEY="sk-newkey-0123456789")
    assert replaced_line("OPENAI_API_KEY") in keyed.stderr.splitlines(), keyed.stderr
    second = pool_pids(state)
    assert len(second) == 2 and not second & first
    wait_until(
        lambda: all(exited(pid) for pid in first), 30, message="the replaced workers to stop"
    )
    # The new workers have the new key in their environment; the record has no value of it.
    assert all("OPENAI_API_KEY=sk-newkey-0123456789" in environ_lines(pid) for pid in second)
    assert "sk-newkey" not in (state / "pool" / "workers.json").read_text()

    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    moved = run_offline(
        cwd=elsewhere, OPENAI_API_KEY="sk-newkey-0123456789", PYTHONPATH=str(elsewhere)
    )
    assert replaced_line("PYTHONPATH, working directory") in moved.stderr.splitlines(), moved.stderr
    assert not pool_pids(state) & second


def environ_lines(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")


def test_redis_stop_stops_the_pool_that_serves_it(state: Path) -> None:
    assert teamctl("workers", "start", "-n", "1").returncode == 0
    (pid,) = pool_pids(state)
    (worker,) = WorkerPool(state / "pool", state / "logs").live()
    assert worker.program == str(executable(pid)) and "python" in worker.program

    stopped = teamctl("redis", "stop")

    assert stopped.returncode == 0
    assert stopped.stdout.splitlines() == ["stopped 1 pool worker", "stopped"]
    assert exited(pid) and pool_pids(state) == set()


@pytest.mark.parametrize("recorded", ["its program", "its program, since removed", "another"])
def test_stop_signals_a_recorded_worker_only_while_it_runs_the_recorded_program(
    tmp_path: Path, recorded: str
) -> None:
    installed = tmp_path / "bin" / "sleep"
    installed.parent.mkdir()
    shutil.copy2(str(shutil.which("sleep")), installed)
    process = subprocess.Popen([str(installed), "60"])
    try:
        program = str(installed.resolve()) if recorded != "another" else sys.executable
        pool = WorkerPool(tmp_path / "pool", tmp_path / "logs")
        pool.root.mkdir(mode=0o700)
        pool.record.write_text(
            json.dumps(
                [
                    asdict(
                        PoolWorker(
                            process.pid,
                            process_start_ticks(process.pid),
                            "r",
                            ["members"],
                            program=program,
                        )
                    )
                ]
            )
        )
        if recorded == "its program, since removed":
            installed.unlink()  # an upgrade replaced the program the worker runs

        stopped = pool.stop(timeout_s=30)

        if recorded == "another":  # same pid, same start, yet not what was recorded
            assert stopped == [] and process.poll() is None
        else:
            assert stopped == [process.pid]
            assert process.wait(timeout=30) == -signal.SIGTERM
        assert not pool.record.exists()
    finally:
        process.kill()
        process.wait(timeout=30)


def test_team_spawn_on_the_embedded_defaults_starts_the_pool_for_its_turn(state: Path) -> None:
    spawned = teamctl(
        "team",
        "spawn",
        "alice",
        "--role",
        "helper",
        "--prompt",
        "Say hello",
        "--model",
        OFFLINE_MODEL,
    )

    assert spawned.returncode == 0, spawned.stderr
    assert STARTED_LINE in spawned.stderr and "no worker listens" not in spawned.stderr
    assert len(pool_pids(state)) == 2

    def alice_idle() -> bool:
        teammates = json.loads(teamctl("team", "list", "--json").stdout)
        return [(m["name"], m["status"]) for m in teammates] == [("alice", "idle")]

    wait_until(alice_idle, 120, interval_s=1, message="alice's first turn on the pool")
    sent = teamctl("team", "send", "alice", "And goodbye")
    assert sent.returncode == 0 and STARTED_LINE not in sent.stderr  # the same pool serves it


def test_workers_outside_the_pool_have_no_pool_environment(workers: str) -> None:
    """The shared workers (and the injection suite's, on `marked`) list with no pool."""
    listed = teamctl("workers", "--redis-url", workers, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert rows and all(row["pool"] is False and row["pool_env"] is None for row in rows)
    lines = teamctl("workers", "--redis-url", workers).stdout.splitlines()  # piped: no header
    assert len(lines) == len(rows) and all(
        re.fullmatch(r"(members|marked)\t\S+:\d+\t\w+\t\S+\t-", line) for line in lines
    ), lines


def listed_teammates(**env: str) -> list[dict[str, object]]:
    listed = teamctl("team", "list", "--json", **env)
    assert listed.returncode == 0, listed.stderr
    teammates: list[dict[str, object]] = json.loads(listed.stdout)
    return teammates


def settled_turn(name: str) -> bool:
    """Whether `name`'s turn is over: idle or shut down, with or without an error."""
    statuses = [m["status"] for m in listed_teammates() if m["name"] == name]
    return statuses in (["idle"], ["shutdown"])


@pytest.mark.parametrize("pool", ["warm without the key", "none"])
def test_a_teammate_spawned_with_a_key_only_the_spawn_has_runs_with_it(
    state: Path, llm: ScriptedLLM, pool: str
) -> None:
    if pool == "warm without the key":
        assert teamctl("workers", "start", "-n", "2").returncode == 0
    keyless = pool_pids(state)
    scripted = f"hal-{uuid.uuid4().hex[:8]}"
    model = llm.script(scripted, ["drafted it"])

    spawned = teamctl(
        "team",
        "spawn",
        "hal",
        "--role",
        "writer",
        "--prompt",
        "Draft it",
        "--model",
        model,
        "--api-base",
        llm.api_base,
        OPENAI_API_KEY=SPAWNER_KEY,
    )

    assert spawned.returncode == 0, spawned.stderr
    assert spawned.stdout.startswith("hal is working in team default")
    wait_until(lambda: settled_turn("hal"), 120, interval_s=0.5, message="hal's first turn")
    (hal,) = listed_teammates()
    assert (hal["status"], hal["idle_reason"], hal["last_error"]) == ("idle", "done", None)
    assert llm.authorizations[scripted] == [f"Bearer {SPAWNER_KEY}"]
    assert "credentials" not in spawned.stderr
    if keyless:  # replaced before the turn was enqueued, and gone
        assert replaced_line("OPENAI_API_KEY") in spawned.stderr.splitlines(), spawned.stderr
        assert all(exited(pid) for pid in keyless)
    assert len(pool_pids(state)) == 2 and not pool_pids(state) & keyless


def test_a_lead_reuses_the_idle_pool_and_starts_no_worker_of_its_own(
    state: Path, llm: ScriptedLLM
) -> None:
    assert teamctl("workers", "start", "-n", "2").returncode == 0
    warm = pool_pids(state)
    lead = llm.script(f"lead-{uuid.uuid4().hex[:8]}", ["nothing to do"])

    led = teamctl("lead", "--model", lead, "--api-base", llm.api_base, "-m", "Status?")

    assert led.returncode == 0, led.stderr
    assert led.stdout.splitlines()[-1] == "nothing to do"
    assert pool_pids(state) == warm and len(warm) == 2  # the same two, none replaced
    assert "local worker" not in led.stderr, led.stderr  # nothing started, stopped or replaced


@pytest.mark.parametrize("own_workers", ["0", "2"])
def test_a_lead_with_a_key_the_pool_lacks_has_its_teammates_turns_run_with_it(
    state: Path, llm: ScriptedLLM, tmp_path: Path, own_workers: str
) -> None:
    """`--workers 0` (as the default): the pool serves the turns, renewed first; `--workers
    2`: the lead's own workers serve them, said when they start and stop, and the pool's of
    another environment are retired first."""
    assert teamctl("workers", "start", "-n", "2").returncode == 0
    keyless = pool_pids(state)
    suffix = uuid.uuid4().hex[:8]
    alice = llm.script(f"alice-{suffix}", ["found it"])
    calls: list[int] = []

    def lead_model(body: dict[str, object]) -> str | ToolCalls:
        calls.append(1)
        if len(calls) == 1:
            return ToolCalls(
                [
                    (
                        "spawn_teammate",
                        {
                            "name": "alice",
                            "role": "researcher",
                            "prompt": "Find it.",
                            "model": alice,
                        },
                    )
                ]
            )
        return "noted"

    lead = llm.script(f"lead-{suffix}", handler=lead_model)
    team_file = tmp_path / "team.toml"
    team_file.write_text(f'[teammates]\ngrantable_models = ["{alice}"]\n')
    assert teamctl("team", "create", "--file", str(team_file)).returncode == 0

    led = teamctl(
        "lead",
        "--workers",
        own_workers,
        "--model",
        lead,
        "--api-base",
        llm.api_base,
        "-m",
        "Spawn alice.",
        "--until-idle",
        OPENAI_API_KEY=SPAWNER_KEY,
    )

    assert led.returncode == 0, led.stderr
    assert llm.authorizations[f"alice-{suffix}"] == [f"Bearer {SPAWNER_KEY}"]
    assert set(llm.authorizations[f"lead-{suffix}"]) == {f"Bearer {SPAWNER_KEY}"}
    (teammate,) = listed_teammates()
    assert (teammate["status"], teammate["last_error"]) == ("idle", None)
    assert all(exited(pid) for pid in keyless)
    verb = "replacing" if own_workers == "0" else "retiring"
    assert (
        f"teamctl: {verb} 2 local pool workers on members started with another "
        "OPENAI_API_KEY" in led.stderr
    ), led.stderr
    own = [
        "teamctl: started 2 local workers for this lead on members; they stop when it exits",
        "teamctl: stopping this lead's 2 local workers (each finishes the turn in hand)",
    ]
    assert [
        line for line in led.stderr.splitlines() if "for this lead" in line or "this lead's" in line
    ] == (own if own_workers == "2" else [])


def test_a_run_with_workers_of_its_own_retires_the_pool_s_of_another_key(
    state: Path, llm: ScriptedLLM, tmp_path: Path, run_id: str
) -> None:
    """`--workers 2`: the run's own workers serve it, and the pool's started without its key
    are retired first, since they listen on the run's queue and would take its jobs."""
    assert teamctl("workers", "start", "-n", "2").returncode == 0
    keyless = pool_pids(state)
    models = script_run(llm, run_id, [{"memberId": "m1", "task": "Collect"}])
    team = team_file(tmp_path / "team.toml", models)

    done = teamctl(
        "run",
        "Collect the facts",
        "--team",
        str(team),
        "--api-base",
        llm.api_base,
        "--run-id",
        run_id,
        "--workers",
        "2",
        OPENAI_API_KEY=SPAWNER_KEY,
    )

    assert done.returncode == 0, done.stderr
    assert (
        "teamctl: retiring 2 local pool workers on members started with another "
        "OPENAI_API_KEY (each finishes the job in hand)" in done.stderr.splitlines()
    ), done.stderr
    assert all(exited(pid) for pid in keyless)
    for role in ("plan", "member", "synth"):  # every call ran where the key is
        assert set(llm.authorizations[f"{role}-{run_id}"]) == {f"Bearer {SPAWNER_KEY}"}, role
