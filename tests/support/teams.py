"""Helpers shared by the persistent-teammate tests: the CLI in process, spawning, the lead's
command, the task board, memory views, and teammates' scripted models."""

from __future__ import annotations

import json
import re
import threading
from typing import Any

from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main
from teamctl.shared.teams.tasks import TeamTask, TeamTasks
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import TeammateStatus

from tests.support.llm import ToolCalls

ASSIGNED = re.compile(r"You now hold (task_\d+)")


def cli(*args: str) -> Result:
    """`teamctl ARGS` in this process."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def spawn(url: str, team: str, name: str, model: str, api_base: str | None, *extra: str) -> Result:
    """`teamctl team spawn NAME` with a role and a prompt named after the teammate."""
    args = [
        "team",
        "spawn",
        name,
        "-t",
        team,
        "--redis-url",
        url,
        "--role",
        f"{name}-role",
        "--prompt",
        f"You are {name}. Start.",
        "--model",
        model,
        *extra,
    ]
    return cli(*args, *(["--api-base", api_base] if api_base else []))


def typed(*args: str, lines: str) -> Result:
    """`teamctl ARGS` in this process, with `lines` on its standard input (a pipe, no terminal)."""
    return CliRunner().invoke(main, list(args), input=lines, catch_exceptions=False)


def lead_args(
    url: str, team: str, model: str, api_base: str, *extra: str, own_workers: bool = False
) -> list[str]:
    """`teamctl lead` on the scripted server; with `own_workers` at the default --workers,
    else none (the session's workers serve the tests' default database)."""
    return [
        "lead",
        "-t",
        team,
        "--redis-url",
        url,
        *([] if own_workers else ["--workers", "0"]),
        "--model",
        model,
        "--api-base",
        api_base,
        *extra,
    ]


def base_args(url: str, team: str) -> tuple[str, ...]:
    """The options that name a team and its Redis."""
    return ("-t", team, "--redis-url", url)


def add(url: str, team: str, subject: str, *extra: str) -> str:
    """`teamctl team task add`; returns the id it printed."""
    result = cli("team", "task", "add", subject, *extra, *base_args(url, team))
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def task(store: TeamStore, task_id: str) -> TeamTask:
    """A team task as the board holds it now."""
    return TeamTasks(store).get(task_id)


def all_idle(store: TeamStore, count: int) -> bool:
    """The team has `count` teammates and every one is idle."""
    teammates = store.teammates()
    return len(teammates) == count and all(m.status is TeammateStatus.IDLE for m in teammates)


def inbox_lines(memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every message injected into a memory through `<inbox>` blocks, in order."""
    found = []
    for message in memory:
        content = message.get("content") or ""
        if message.get("role") == "user" and content.startswith("<inbox>"):
            found += [json.loads(line) for line in content.splitlines()[1:-1]]
    return found


class HeldFirstCall:
    """A scripted model whose first call waits for the test's go-ahead (`release`), answering
    `first`; later calls answer `later` at once."""

    def __init__(self, first: str, later: str) -> None:
        self.first, self.later = first, later
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(60)
            return self.first
        return self.later


class Doer:
    """A teammate's model: 'ready' until a task.assigned arrives, then complete_task for it
    (after `hold` is set, when given), then 'done'."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.hold = hold
        self.entered = threading.Event()

    def __call__(self, body: dict[str, Any]) -> str | ToolCalls:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return "done"
        found = ASSIGNED.findall(last.get("content") or "") if last["role"] == "user" else []
        if not found:
            return "ready"
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(60)
        return ToolCalls([("complete_task", {"task_id": found[-1], "result": f"did {found[-1]}"})])


class Stubborn:
    """A teammate's model that never completes its task: it just answers."""

    def __call__(self, body: dict[str, Any]) -> str:
        content = body["messages"][-1].get("content") or ""
        if "task.reminder" in content:
            return "still thinking"
        return "thinking about it" if ASSIGNED.search(content) else "ready"
