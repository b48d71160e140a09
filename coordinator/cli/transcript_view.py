"""`teamctl transcript`: one task's stored conversation, a line per message, safe for a terminal.

What a member's model was sent and answered (its tool calls with their arguments, each tool's
result) is model output: every line is flattened and cut, so nothing in it acts on the terminal.
"""

from __future__ import annotations

import json
from typing import Any

import click
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.shared.errors import ConfigError
from teamctl.shared.ids import check_task_id
from teamctl.shared.runs.journal import in_doubt_label
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.text import one_line

LINE_CHARS = 300
"""How much of one message a line shows (--json prints them whole)."""


def transcript_command(redis_url: str, run_id: str | None, task_id: str, as_json: bool) -> None:
    """Print the task's transcript (the last attempt's), or say why there is none."""
    run = existing_run(redis_url, run_id)
    task_id = check_task_id(task_id)
    if run.board.get(task_id) is None:  # one task's hash, not the whole board
        raise ConfigError(
            f"run {run.run_id} has no task {task_id}; `teamctl tasks {run.run_id}` lists its tasks"
        )
    kept = Transcripts(run.conn, run.keys, run.scripts).load_many([task_id]).get(task_id)
    if kept is None:
        click.echo(f"{task_id}: no transcript (its session has not started, or was never kept)")
        return
    for message in kept:
        click.echo(json.dumps(message) if as_json else message_line(message))


def message_line(message: dict[str, Any]) -> str:
    """One message as `role: text`; a reply's tool calls follow its text as `name(arguments)`;
    a tool result a crash left in doubt says so after the tool's name."""
    role = one_line(str(message.get("role", "?")), 20)
    text = one_line(str(message.get("content") or ""), LINE_CHARS)
    if role == "tool":
        name = one_line(str(message.get("name") or message.get("tool_call_id") or ""), 80)
        doubt = in_doubt_label(message.get("in_doubt"))
        return f"tool {name} ({doubt}): {text}" if doubt else f"tool {name}: {text}"
    calls = [
        call.get("function") or {}
        for call in message.get("tool_calls") or []
        if isinstance(call, dict)
    ]
    if not calls:
        return f"{role}: {text}"
    called = "; ".join(f"{f.get('name', '?')}({f.get('arguments', '')})" for f in calls)
    said = f"{text} " if text else ""
    return f"{role}: {said}calls {one_line(called, LINE_CHARS)}"
