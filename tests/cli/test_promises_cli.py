"""README promises about the command line: Ctrl-C cancels the run and exits 130, `resume` of a
run whose coordinator died approves a plan left waiting, the live table on a terminal vs one
summary line, plain `teamctl tasks`, and the embedded Redis keeping its data across `teamctl
redis stop`."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from click.testing import CliRunner
from teamctl.coordinator.advice import teamctl_prog
from teamctl.coordinator.cli import main
from teamctl.shared.board import TaskBoard
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.embedded import EmbeddedRedis
from teamctl.shared.runs.store import RunStore

from tests.support.cli import TEAMCTL
from tests.support.llm import ScriptedLLM, Slow
from tests.support.replies import script_run, task_id_of
from tests.support.runs import two_task_run
from tests.support.teamfile import team_file
from tests.support.waiting import wait_until

ANSI = re.compile(r"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][A-Z0-9]|[=>])")
TWO_TASKS = [
    {"id": "a", "memberId": "m1", "task": "A"},
    {"id": "b", "memberId": "m2", "task": "B", "dependsOn": ["a"]},
]


def own_queue_team(path: Path, models: dict[str, str], queue: str, **options: object) -> Path:
    """One member, m1, on a queue of its own, so only the run's own workers take its jobs."""
    lines = [
        f'planner = {{ model = "{models["planner"]}" }}',
        f'synthesizer = {{ model = "{models["synth"]}" }}',
        "[[members]]",
        'id = "m1"',
        f'model = "{models["member"]}"',
        f'queue = "{queue}"',
        "[options]",
        *(f"{k} = {json.dumps(v)}" for k, v in options.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def slow_a_then_b(body: dict[str, Any]) -> str | Slow:
    """Task a's model call takes 3 s (the job in hand when Ctrl-C comes); b answers at once."""
    task_id = task_id_of(body)
    return Slow(f"output of {task_id}", 3.0) if task_id == "a" else f"output of {task_id}"


def test_ctrl_c_cancels_the_run_it_started_and_exits_130_naming_it(
    llm: ScriptedLLM,
    redis_server: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    """Ctrl-C reaches the whole foreground process group: the coordinator and its workers. The
    run is cancelled as `teamctl cancel` would (not left running with no coordinator), the
    message names it by id, and the workers it started stop after the job in hand."""
    conn = redis.Redis.from_url(redis_server, decode_responses=True)
    queue = f"q-{uuid.uuid4().hex[:8]}"
    plan = [
        {"id": "a", "memberId": "m1", "task": "A"},
        {"id": "b", "memberId": "m1", "task": "B", "dependsOn": ["a"]},
    ]
    models = script_run(llm, run_id, plan, member=slow_a_then_b, synth=None)
    team = own_queue_team(tmp_path / "t.toml", models, queue, heartbeat_ttl_s=1.0)
    run = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_server,
            "--workers",
            "1",
            "--run-id",
            run_id,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    group_reaper.append(run)
    wait_until(
        lambda: len(llm.requests[f"member-{run_id}"]) == 1,
        120,
        message="the member's model call on task a",
    )

    os.killpg(run.pid, signal.SIGINT)
    interrupted_at = time.monotonic()
    out, err = run.communicate(timeout=60)
    took_s = time.monotonic() - interrupted_at

    assert run.returncode == 130, err
    assert took_s < 5, took_s  # the promise is 2 s; a loaded CI machine gets some slack
    assert out == b""  # no answer: the run never reached its synthesis
    assert err.decode().strip().splitlines()[-1] == (
        f"teamctl: interrupted; run {run_id} cancelled: nothing more is dispatched and its "
        f"members stop at their next model call (`{teamctl_prog()} status {run_id} "
        f"--redis-url {redis_server}` shows what it did)"
    )
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.status, state.error) == ("cancelled", "cancelled")
    assert not conn.exists(RunKeys(run_id).lease)
    board = TaskBoard(conn, RunKeys(run_id))
    b = board.get("b")
    assert (b.status, b.error, b.attempts) == ("blocked", "cancelled", 0)  # as `cancel` says
    assert board.get("a").status == "failed"  # its claim revoked: a late write is refused
    # The run's worker finishes the job in hand and exits by itself.
    wait_until(
        lambda: not conn.smembers(f"rq:workers:{queue}"), 60, message="the run's worker to exit"
    )
    assert len(llm.requests[f"member-{run_id}"]) == 1  # b never ran


def test_resume_approve_plan_approves_a_plan_left_waiting(
    llm: ScriptedLLM,
    workers: str,
    run_id: str,
    tmp_path: Path,
    group_reaper: list[subprocess.Popen[bytes]],
) -> None:
    conn = redis.Redis.from_url(workers, decode_responses=True)
    models = script_run(llm, run_id, [{"id": "a", "memberId": "m1", "task": "A"}])
    team = team_file(tmp_path / "t.toml", models, options={"require_plan_approval": True})
    run = subprocess.Popen(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    group_reaper.append(run)
    wait_until(
        lambda: (
            RunStore(conn, RunKeys(run_id)).exists()
            and RunStore(conn, RunKeys(run_id)).state().status == "awaiting_approval"
        ),
        90,
        message="the plan to await approval",
    )
    run.kill()  # the coordinator dies (Ctrl-C would cancel the run): its lease runs out
    assert run.wait(timeout=60) == -signal.SIGKILL
    wait_until(
        lambda: not conn.exists(RunKeys(run_id).lease),
        120,
        message="the dead coordinator's lease to expire",
    )

    resumed = CliRunner().invoke(
        main,
        ["resume", run_id, "--redis-url", workers, "--workers", "0", "--approve-plan", "--json"],
    )

    assert resumed.exit_code == 0, resumed.output
    out = json.loads(resumed.stdout)
    assert (out["status"], out["task_states"][0]["status"]) == ("completed", "completed")
    assert [m["content"] for m in out["messages"] if m["type"] == "plan.approved"] == [
        "approved with --approve-plan"
    ]
    state = RunStore(conn, RunKeys(run_id)).state()
    assert (state.approval, state.approval_reason) == ("approved", "approved with --approve-plan")
    assert len(llm.prompts(f"plan-{run_id}")) == 1


def run_with_stderr_on_a_terminal(args: list[str], timeout_s: float) -> tuple[int, str, str]:
    """Run a command whose stderr is a pseudo-terminal (120x40); its exit code, stdout, and
    what it drew on the terminal with the escape sequences removed."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TTY_COMPATIBLE"):
        env.pop(name, None)
    chunks: list[bytes] = []

    def read_all() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: every holder of the terminal's other end has closed it
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read_all, daemon=True)
    try:
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower, env=env
        )
        os.close(follower)
        follower = -1
        reader.start()
        try:
            out, _ = process.communicate(timeout=timeout_s)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
        reader.join(10)
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)
    drawn = ANSI.sub("", b"".join(chunks).decode(errors="replace"))
    return process.returncode, out.decode(), drawn


def table_rows(drawn: str) -> set[tuple[str, ...]]:
    """Every distinct line drawn, as its words."""
    return {tuple(line.split()) for line in re.split(r"[\r\n]+", drawn) if line.strip()}


def approve_once_it_waits(redis_url: str, run_id: str, failures: list[str]) -> None:
    """`teamctl approve RUN` from another process once the run awaits approval (any failure
    kept in `failures`: a thread cannot fail the test itself)."""
    store = RunStore(redis.Redis.from_url(redis_url, decode_responses=True), RunKeys(run_id))
    try:
        wait_until(
            lambda: store.exists() and store.state().status == "awaiting_approval",
            90,
            message="the plan to await approval",
        )
        subprocess.run(
            [*TEAMCTL, "approve", run_id, "--redis-url", redis_url],
            check=True,
            capture_output=True,
            timeout=60,
        )
    except (AssertionError, subprocess.SubprocessError) as exc:
        failures.append(repr(exc))


def test_live_table_on_a_terminal_and_one_summary_line_otherwise(
    llm: ScriptedLLM, workers: str, run_id: str, tmp_path: Path
) -> None:
    models = script_run(llm, run_id, TWO_TASKS)
    team = team_file(tmp_path / "t.toml", models, options={"require_plan_approval": True})
    failures: list[str] = []
    approver = threading.Thread(target=approve_once_it_waits, args=(workers, run_id, failures))
    approver.start()

    code, out, drawn = run_with_stderr_on_a_terminal(
        [
            *TEAMCTL,
            "run",
            "Ship it",
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            run_id,
        ],
        120,
    )
    approver.join(120)

    assert failures == [] and code == 0, (failures, drawn)
    assert out == "final answer\n"
    rows = table_rows(drawn)
    assert ("task", "member", "status", "attempts", "elapsed") in rows, drawn
    finished = {row[:4] for row in rows if len(row) == 5 and re.fullmatch(r"\d+\.\ds", row[4])}
    assert {("a", "m1", "completed", "1"), ("b", "m2", "completed", "1")} <= finished, drawn
    assert ("b", "m2", "pending", "0", "-") in rows, drawn  # drawn live, before b ran
    # The table's title is the run's phase, from planning to its end.
    assert {
        ("planning",),
        ("waiting", "for", "approval"),
        ("dispatching",),
        ("synthesizing",),
        ("completed",),
    } <= rows, drawn

    plain_id = run_id + "-plain"
    script_run(llm, plain_id, TWO_TASKS)
    plain = CliRunner().invoke(
        main,
        [
            "run",
            "Ship it",
            "--team",
            str(
                team_file(
                    tmp_path / "p.toml",
                    {
                        "planner": f"openai/plan-{plain_id}",
                        "synth": f"openai/synth-{plain_id}",
                        "member": f"openai/member-{plain_id}",
                    },
                )
            ),
            "--api-base",
            llm.api_base,
            "--redis-url",
            workers,
            "--workers",
            "0",
            "--run-id",
            plain_id,
        ],
    )

    assert plain.exit_code == 0, plain.output
    assert plain.stdout == "final answer\n"
    first, summary = plain.stderr.splitlines()
    assert first == f"teamctl: run {plain_id} on {workers}"
    assert re.fullmatch(
        rf"teamctl: run {plain_id} completed in 2 rounds, 2 tasks ran, "
        r"\d+\.\ds, \d+ tokens, unpriced",
        summary,
    ), summary


def test_plain_tasks_lists_the_board_one_task_a_line(
    conn: redis.Redis, redis_url: str, run_id: str, tmp_path: Path
) -> None:
    two_task_run(conn, run_id, tmp_path)
    board = TaskBoard(conn, RunKeys(run_id))
    token = board.claim("a", "researcher", "host:1", 60)
    board.fail("a", token, "the source was gone")

    result = CliRunner().invoke(main, ["tasks", run_id, "--redis-url", redis_url])

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "a\tfailed\tresearcher\t1\tthe source was gone",
        "b\tblocked\t-\t0\tdependency failed",
    ]
    missing = CliRunner().invoke(main, ["tasks", "nope", "--redis-url", redis_url])
    assert missing.exit_code == 2 and "no run nope" in missing.stderr


def test_embedded_redis_keeps_a_run_across_stop_and_start(
    llm: ScriptedLLM, run_id: str, tmp_path: Path
) -> None:
    """No --redis-url and no REDIS_URL: the embedded server, appendonly from its first start."""
    runner = CliRunner()
    server = EmbeddedRedis(tmp_path / "state" / "redis")
    try:
        first = runner.invoke(main, ["redis", "url"])
        assert first.exit_code == 0, first.output
        url = first.stdout.strip()
        assert redis.Redis.from_url(url).dbsize() == 0
        aof = [p.name for p in server.root.iterdir() if p.name.startswith("appendonly")]
        assert aof, f"no appendonly file before any write: {sorted(os.listdir(server.root))}"

        # An unusable plan, not broadcast: no member runs, and the run still writes its spec,
        # state, plan, messages and output (one run-scoped worker makes the model calls).
        models = script_run(llm, run_id, "no plan here", synth="kept answer")
        ran = runner.invoke(
            main,
            [
                "run",
                "Keep me",
                "--team",
                str(team_file(tmp_path / "t.toml", models)),
                "--api-base",
                llm.api_base,
                "--workers",
                "1",
                "--run-id",
                run_id,
                "--no-broadcast-on-planner-failure",
            ],
        )
        assert ran.exit_code == 0, ran.output
        assert f"run {run_id} on unix://:***@" in ran.stderr

        stopped = runner.invoke(main, ["redis", "stop"])
        assert stopped.stdout.strip() == "stopped"
        assert server.running_url() is None

        again = runner.invoke(main, ["redis", "url"])
        assert again.stdout.strip() == url
        status = runner.invoke(main, ["status", run_id, "--json"])
        assert status.exit_code == 0, status.output
        out = json.loads(status.stdout)
        assert (out["status"], out["output"], out["objective"]) == (
            "completed",
            "kept answer",
            "Keep me",
        )
        assert [m["type"] for m in out["messages"]][-1] == "run.complete"
    finally:
        server.stop()
