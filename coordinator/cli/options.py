"""One `run` flag per run option , generated from RunOptions; flags override the file."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Literal

import click
from pydantic import ValidationError
from teamctl.shared.errors import ConfigError
from teamctl.shared.runs.options import RunOptions

HELP = {
    "parallel_dispatch": "Dispatch up to --max-concurrency tasks per round (off: one at a time).",
    "max_concurrency": "Tasks in flight at once.",
    "max_rounds": "Rounds before the remaining tasks are blocked.",
    "continue_on_member_error": "Keep dispatching after a task fails (off: the run fails).",
    "fail_on_unknown_member": "Fail tasks assigned to unknown members (off: first member).",
    "broadcast_on_planner_failure": "Give every member the objective if the plan is unusable.",
    "enable_message_bus": "Publish and deliver team messages.",
    "include_original_objective_in_dispatch": "Tell members the objective.",
    "include_task_context_in_dispatch": "Tell members the task's context.",
    "include_message_history_in_dispatch": "Show members recent team messages.",
    "message_history_limit": "Recent messages shown to a member (0: all).",
    "require_plan_approval": "Wait for the plan to be approved before dispatching.",
    "enable_member_team_tools": "Give members the team_* tools.",
    "dispatch": "eager: refill as soon as a task ends; barrier: wait for the whole round.",
    "heartbeat_ttl_s": "Seconds a claim lives without a heartbeat before it is reclaimed.",
    "max_attempts": "Claims of one task before it fails.",
    "member_max_steps": "Model calls per task.",
    "max_tokens": "Run-wide token budget.",
    "max_cost_usd": "Run-wide cost budget in USD.",
    "timeout_s": "Seconds this coordinator drives the run before stopping it.",
    "model_timeout_s": "Seconds per model call.",
    "model_max_retries": "Retries of a model call on 429, 5xx and timeouts.",
    "fallback_after_s": "Seconds a call waits for its model's paused provider account before "
    "moving on to a fallback model.",
    "fallback_cooldown_s": "Seconds calls skip a model whose retries were spent (when they "
    "have a fallback).",
    "max_message_bytes": "Largest message a member may send, in bytes (every field counts).",
    "dependency_output_chars": "Characters of each dependency's output given to a member.",
    "bus_max_messages": "Messages a run's bus keeps (never dropping unread ones).",
    "lease_ttl_s": "Seconds before a dead coordinator's run may be resumed.",
    "redis_outage_s": "Seconds every process rides through a Redis outage before giving up.",
    "retention_s": "Seconds an ended run's keys stay in Redis.",
    "tool_result_max_chars": "Longest result any tool gives the model, in characters.",
    "tool_timeout_s": "Seconds one Python tool call may take (then a ToolTimeout result).",
    "max_task_releases": "team_release_task calls of one task before the next fails it.",
    "transcript_max_chars": "Longest transcript kept per task for the result, in characters "
    "(0: none).",
    "mcp_start_timeout_s": "Seconds an MCP server may take to start (else the task fails).",
    "mcp_list_timeout_s": "Seconds listing an MCP server's tools may take (else the task fails).",
    "mcp_call_timeout_s": "Seconds one MCP tool call may take (else a TOOL_ERROR result).",
    "workspace_file_max_bytes": "Largest file a workspace kept in Redis holds, in bytes (a "
    "larger save is a tool error).",
    "workspace_max_bytes": "Most bytes a workspace kept in Redis holds there (content, paths "
    "and 512 bytes a path).",
    "workspace_max_files": "Most files a workspace kept in Redis holds.",
    "journal_max_bytes": "Largest step journal kept per task, in bytes (0: none).",
}


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def _click_type(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is Literal:
        return click.Choice(typing.get_args(annotation))
    return annotation


def _bounds(metadata: list[Any]) -> str:
    """A field's range as help text ("more than 0, at most 604800"), from its constraints."""
    words = {"gt": "more than", "ge": "at least", "lt": "less than", "le": "at most"}
    parts = [
        f"{word} {getattr(c, attr)}"
        for c in metadata
        for attr, word in words.items()
        if getattr(c, attr, None) is not None
    ]
    return "; " + ", ".join(parts) if parts else ""


def run_option_flags(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a click command with one flag per RunOptions field (default None: not given)."""
    for name, info in reversed(RunOptions.model_fields.items()):
        help_text = f"{HELP.get(name, name)} [default: {info.default}{_bounds(info.metadata)}]"
        flag = flag_name(name)
        if info.annotation is bool:
            decl = f"{flag}/--no-{flag[2:]}"
            fn = click.option(decl, name, default=None, help=help_text)(fn)
        else:
            fn = click.option(
                flag, name, type=_click_type(info.annotation), default=None, help=help_text
            )(fn)
    return fn


def merge_options(base: RunOptions, flags: dict[str, Any]) -> RunOptions:
    """The team file's options with every given flag applied; a bad value names its flag."""
    given = {k: v for k, v in flags.items() if v is not None and k in RunOptions.model_fields}
    try:
        return RunOptions.model_validate({**base.model_dump(), **given})
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "options"
        raise ConfigError(f"{flag_name(field)}: {first['msg']}") from exc
