"""The teamctl command as the tests run it: in a child process, or in this process through
click's runner, and what its output and exit say."""

from __future__ import annotations

import sys
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


def run_cli(llm: ScriptedLLM, redis_url: str, run_id: str, team: Path, *extra: str,
            objective: str = "Ship the thing") -> Result:
    """`teamctl run --json` in this process on the scripted server, with no workers of its own."""
    return CliRunner().invoke(main, [
        "run", objective, "--team", str(team), "--api-base", llm.api_base,
        "--redis-url", redis_url, "--workers", "0", "--run-id", run_id, "--json", *extra])


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
