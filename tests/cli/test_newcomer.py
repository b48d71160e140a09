"""A newcomer's first steps, as subprocesses in a fresh HOME and state dir: the Quickstart run, then
a run with a provider key (the model server must see that key, though the pool's workers were
started without it), then a Python tool found on a changed PYTHONPATH, then every command teamctl
printed as advice, run as printed with `bash -c` in the same environment."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from teamctl.coordinator.local_workers.pool import WorkerPool
from teamctl.shared.redis.embedded import EmbeddedRedis

from tests.support.cli import TEAMCTL_SCRIPT
from tests.support.llm import ScriptedLLM, ToolCalls
from tests.support.waiting import wait_until
from tests.support.workers import ENV_PREFIXES

ADVICE = re.compile(r"`([^`]+)`")
KEY = "sk-newcomer-0123456789abcdef"
TOOL_MODULE = '''
def shout(text: str) -> str:
    """Say `text` louder."""
    return text.upper() + "!"
'''


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A fresh HOME whose default state dir holds the embedded Redis and the pool; both are
    stopped by pid at the end."""
    root = tmp_path / "home"
    root.mkdir()
    yield root
    state = root / ".local" / "state" / "teamctl"
    WorkerPool(state / "pool", state / "logs").stop()
    EmbeddedRedis(state / "redis").stop()


def newcomer_env(home: Path, **extra: str) -> dict[str, str]:
    """A shell with nothing of teamctl's set: no state dir, no Redis, no key, no RQ variable."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith((*ENV_PREFIXES, "RQ_", "XDG_", "PYTHONPATH"))
    }
    return {**env, "HOME": str(home), "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def teamctl(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TEAMCTL_SCRIPT, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=240,
    )


def advice(stderr: str) -> list[str]:
    """The commands a command's stderr suggested, in order, each once."""
    found: list[str] = []
    for command in ADVICE.findall(stderr):
        if command not in found:
            found.append(command)
    return found


def test_a_newcomers_first_runs_and_every_hint_as_printed(
    llm: ScriptedLLM, home: Path, tmp_path: Path
) -> None:
    env = newcomer_env(home)
    hints: list[str] = []

    quickstart = teamctl(env, "run", "Plan a one-day offsite for a team of eight")
    assert quickstart.returncode == 0, quickstart.stderr
    assert quickstart.stdout.startswith("Answer to: Plan a one-day offsite for a team of eight")
    assert "no worker listens" not in quickstart.stderr
    hints += advice(quickstart.stderr)

    # The pool started above has no key: its workers are replaced by ones that have it.
    model = llm.script(
        "newcomer-model",
        [
            '{"tasks": [{"id": "a", "memberId": "researcher", "task": "Find it"}]}',
            "found it",
            "the answer",
        ],
    )
    keyed = teamctl(
        {**env, "OPENAI_API_KEY": KEY},
        "run",
        "Find it",
        "--model",
        model,
        "--api-base",
        llm.api_base,
    )
    assert keyed.returncode == 0, keyed.stderr
    assert keyed.stdout == "the answer\n"
    assert llm.authorizations["newcomer-model"] == [f"Bearer {KEY}"] * 3
    assert (
        "replacing 2 local pool workers on members started with another OPENAI_API_KEY"
        in keyed.stderr
    )
    hints += advice(keyed.stderr)

    # A Python tool from a directory on PYTHONPATH, the team file in the project directory.
    tools, project = tmp_path / "tools", tmp_path / "project"
    tools.mkdir()
    project.mkdir()
    (tools / "newcomer_tools.py").write_text(TOOL_MODULE)
    (project / "team.toml").write_text(
        '[[members]]\nid = "crier"\ntools = ["newcomer_tools:shout"]\n'
    )
    crier = llm.script(
        "crier-model",
        [
            '{"tasks": [{"id": "a", "memberId": "crier", "task": "Shout hi"}]}',
            ToolCalls([("shout", {"text": "hi"})]),
            "shouted",
            "HI! was shouted",
        ],
    )
    shouted = teamctl(
        {**env, "PYTHONPATH": str(tools)},
        "run",
        "Shout hi",
        "--team",
        "team.toml",
        "--model",
        crier,
        "--api-base",
        llm.api_base,
        cwd=project,
    )
    assert shouted.returncode == 0, shouted.stderr
    assert shouted.stdout == "HI! was shouted\n"
    tool_result = llm.requests["crier-model"][2]["messages"][-1]
    assert (tool_result["role"], tool_result["content"]) == ("tool", "HI!")
    hints += advice(shouted.stderr)

    assert_hints_work_as_printed(env, hints, llm)


def assert_hints_work_as_printed(env: dict[str, str], hints: list[str], llm: ScriptedLLM) -> None:
    """Run each suggested command with `bash -c`, as a person pasting it would."""
    stop = [h for h in hints if h.endswith("workers stop")]
    assert stop, hints
    stopped = bash(env, stop[0])
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped 2 pool workers")

    # No worker at all now: the run says so, and how to start one.
    model = llm.script(
        "waiting-model",
        [
            '{"tasks": [{"id": "a", "memberId": "researcher", "task": "Wait"}]}',
            "waited",
            "nothing to do",
        ],
    )
    waiting = subprocess.Popen(
        [
            TEAMCTL_SCRIPT,
            "run",
            "Wait",
            "--workers",
            "0",
            "--model",
            model,
            "--api-base",
            llm.api_base,
        ],
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    wait_until(
        lambda: lines.append(waiting.stderr.readline()) or "no worker" in lines[-1],
        60,
        message="the no-worker hint",
    )
    foreground, background = advice(lines[-1])
    assert foreground.endswith("worker members"), lines[-1]
    assert background.endswith("workers start --queue members"), lines[-1]
    worker = subprocess.Popen(
        ["bash", "-c", foreground],
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out, err = waiting.communicate(timeout=180)
        assert waiting.returncode == 0, err
        assert out == "nothing to do\n"
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
    started = bash(env, background)
    assert started.returncode == 0 and "2 started" in started.stdout, started.stderr
    assert bash(env, stop[0]).stdout.startswith("stopped 2 pool workers")


def bash(env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
