"""The teamctl command as the tests run it: in a child process, or in this process through
click's runner, and what its output and exit say."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.clock import now_ms
from teamctl.shared.text import clock_text

from tests.support.llm import ScriptedLLM

TEAMCTL = [sys.executable, "-c", "from teamctl.coordinator.cli import main; main()"]
"""`teamctl` in a child process, from this checkout, whatever is on PATH."""
TEAMCTL_SCRIPT = str(Path(sys.executable).parent / "teamctl")
"""The console script the package installs beside this Python, as a newcomer runs it."""


def run_cli(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    team: Path,
    *extra: str,
    objective: str = "Ship the thing",
) -> Result:
    """`teamctl run --json` in this process on the scripted server, with no workers of its own."""
    return CliRunner().invoke(
        main,
        [
            "run",
            objective,
            "--team",
            str(team),
            "--api-base",
            llm.api_base,
            "--redis-url",
            redis_url,
            "--workers",
            "0",
            "--run-id",
            run_id,
            "--json",
            *extra,
        ],
    )


def run_one_task_in_thread(
    llm: ScriptedLLM,
    redis_url: str,
    run_id: str,
    queue: str,
    tmp_path: Path,
    *,
    member_model: str,
    tool: str,
    task: str,
    heartbeat_ttl_s: float,
) -> tuple[threading.Thread, list[Result]]:
    """`teamctl run --json` in a thread: one task `work` of member m1 (`member_model`, with the
    Python tool `tool` and no team tools), every role on `queue`; the thread appends its
    result to the list."""
    plan = {"tasks": [{"id": "work", "memberId": "m1", "task": task}]}
    team = tmp_path / "team.toml"
    team.write_text(
        "\n".join(
            [
                f'planner = {{ model = "{llm.script(f"plan-{run_id}", [json.dumps(plan)])}", '
                f'queue = "{queue}" }}',
                f'synthesizer = {{ model = "{llm.script(f"synth-{run_id}", ["final"])}", '
                f'queue = "{queue}" }}',
                "[[members]]",
                'id = "m1"',
                f'queue = "{queue}"',
                f'tools = ["{tool}"]',
                f'model = "{member_model}"',
                "[options]",
                f"heartbeat_ttl_s = {heartbeat_ttl_s}",
                "enable_member_team_tools = false",
            ]
        )
        + "\n"
    )
    results: list[Result] = []
    args = ["run", task, "--team", str(team), "--api-base", llm.api_base]
    args += ["--redis-url", redis_url, "--workers", "0", "--run-id", run_id, "--json"]
    thread = threading.Thread(target=lambda: results.append(CliRunner().invoke(main, args)))
    thread.start()
    return thread, results


def errors(out: dict[str, Any]) -> dict[str, str | None]:
    """Each task's error in a `run --json` output."""
    return {s["task_id"]: s["error"] for s in out["task_states"]}


def assert_config_error(result: Result, says: str) -> None:
    """Exit 2 with one line on stderr that says it, no traceback."""
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def shown_at(at_ms: int) -> str:
    """How a line of `messages`, `team messages` or `events` shows a time (local, as now)."""
    return clock_text(at_ms, now_ms())


def on_a_terminal(args: list[str], deadline_s: float = 120) -> tuple[int, str, str]:
    """`args` run with stdout on a pseudo-terminal (stdin and stderr not): exit code, what the
    terminal showed (its CR LF made LF again) and stderr."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        args, stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, text=True
    )
    os.close(follower)
    shown = b""
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the process, the terminal's last holder, has exited
                break
            if not chunk:
                break
            shown += chunk
        _, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
            process.wait(30)
    return process.returncode, shown.decode().replace("\r\n", "\n"), stderr
