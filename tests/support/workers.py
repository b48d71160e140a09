"""Worker processes in tests: starting a group without the user's settings, and whether workers
or a process are done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import redis
from rq import Queue, Worker
from teamctl.coordinator.cli.local_workers import LocalWorkers
from teamctl.shared.processes import pid_alive

ENV_PREFIXES = ("TEAMCTL_", "REDIS_URL", "OPENAI_", "ANTHROPIC_", "GEMINI_", "MISTRAL_", "GROQ_",
                "DEEPSEEK_", "OPENROUTER_")
"""The environment variables of a user's teamctl and provider settings, kept out of every test."""


def start_clean(group: LocalWorkers) -> None:
    """Start `group` without the user's teamctl and provider settings in its environment: a
    session or module fixture is built before the per-test clean_environ, and its workers
    would keep them for every test."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(ENV_PREFIXES):
                patch.delenv(name)
        group.start()


def workers_idle(url: str) -> bool:
    """The shared workers' `members` queue is empty and none of its workers is busy."""
    queue = Queue("members", connection=redis.Redis.from_url(url))
    return queue.count == 0 and all(w.get_state() != "busy" for w in Worker.all(queue=queue))


def exited(pid: int) -> bool:
    """Gone, or a zombie (an orphan's exit that no init has reaped yet)."""
    if not pid_alive(pid):
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:  # it exited meanwhile, or there is no /proc to ask
        return not pid_alive(pid)
