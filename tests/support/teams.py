"""Helpers shared by the persistent-teammate tests: the CLI in process, spawning, memory views."""

from __future__ import annotations

import json
import threading
from typing import Any

from click.testing import CliRunner, Result
from teamctl.coordinator.cli import main


def cli(*args: str) -> Result:
    """`teamctl ARGS` in this process."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def spawn(url: str, team: str, name: str, model: str, api_base: str | None,
          *extra: str) -> Result:
    """`teamctl team spawn NAME` with a role and a prompt named after the teammate."""
    args = ["team", "spawn", name, "-t", team, "--redis-url", url, "--role", f"{name}-role",
            "--prompt", f"You are {name}. Start.", "--model", model, *extra]
    return cli(*args, *(["--api-base", api_base] if api_base else []))


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
