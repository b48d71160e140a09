"""Id normalization and validation: every id passes here before it reaches a key or a path."""

from __future__ import annotations

import re

from teamctl.shared.errors import ConfigError
from teamctl.shared.text import quoted

_INVALID_CHAR = re.compile(r"[^a-z0-9_-]")
_UNDERSCORES = re.compile(r"_+")
# Matched with fullmatch: `$` with re.match also accepts a trailing newline, which would end up
# in a Redis key and a directory name.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SAFE_TASK_ID = re.compile(r"[a-z0-9_-]{1,128}")

_TEAM_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_REQUEST_ID = re.compile(r"req_[0-9a-f]{12}")
"""Team and teammate names (fullmatch): short, lower case, safe in keys and paths."""

RESERVED_MEMBER_IDS = frozenset({"lead", "system"})
BROADCAST = "*"


def normalize_id(raw: str | None) -> str | None:
    """Normalize a task or member id as AI4J does; None means "no usable id"."""
    if raw is None:
        return None
    text = raw.strip().lower()
    text = _INVALID_CHAR.sub("_", text)
    text = _UNDERSCORES.sub("_", text).strip("_")
    return text or None


def is_safe_id(value: str) -> bool:
    """True for run/team ids that may be embedded in a Redis key or a file name."""
    return bool(_SAFE_ID.fullmatch(value)) and ".." not in value


QUEUE_RULE = "use letters, digits, '.', '_' or '-', starting with a letter or digit"
"""What an RQ queue name may be: it becomes part of Redis keys."""


def check_queue(queue: str) -> str:
    """Return an RQ queue name unchanged, or raise ConfigError saying what it may be."""
    if not isinstance(queue, str) or not is_safe_id(queue):
        raise ConfigError(f"invalid queue {quoted(queue)}: {QUEUE_RULE}")
    return queue


def check_run_id(run_id: str) -> str:
    """Return the run id unchanged, or raise ConfigError saying what a run id may contain."""
    if not isinstance(run_id, str) or not is_safe_id(run_id):
        raise ConfigError(
            f"invalid run id {quoted(run_id)}: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return run_id


def check_task_id(task_id: str) -> str:
    """Return a normalized task id unchanged, or raise ConfigError."""
    if not isinstance(task_id, str) or not _SAFE_TASK_ID.fullmatch(task_id):
        raise ConfigError(f"invalid task id {quoted(task_id)}: task ids match [a-z0-9_-]{{1,128}}")
    return task_id


def check_member_id(member_id: str) -> str:
    """Return a normalized member id unchanged, or raise ConfigError."""
    if not isinstance(member_id, str) or not _SAFE_TASK_ID.fullmatch(member_id):
        raise ConfigError(
            f"invalid member id {quoted(member_id)}: member ids match [a-z0-9_-]{{1,128}}"
        )
    return member_id


def check_team_name(name: str, what: str = "team name") -> str:
    """Return a team (or teammate) name unchanged, or raise ConfigError saying what it may be."""
    if not isinstance(name, str) or not _TEAM_NAME.fullmatch(name):
        raise ConfigError(
            f"invalid {what} {quoted(name)}: use 1-32 of a-z, 0-9, '_' or '-', "
            "starting with a letter"
        )
    return name


def check_request_id(request_id: str) -> str:
    """Return a protocol request id (`req_` and 12 hex digits) unchanged, or raise ConfigError."""
    if not isinstance(request_id, str) or not _REQUEST_ID.fullmatch(request_id):
        raise ConfigError(
            f"invalid request id {quoted(request_id)}: request ids are 'req_' "
            "and 12 hex digits (see `teamctl team requests`)"
        )
    return request_id


MODEL_CALLS = frozenset({"planner", "synthesizer"})
"""The coordinator's own model calls, each run as a job on a worker."""


def check_call_name(call: str) -> str:
    """Return a coordinator model call's name unchanged, or raise ConfigError."""
    if call not in MODEL_CALLS:
        raise ConfigError(
            f"invalid model call {quoted(call)}: use one of {', '.join(sorted(MODEL_CALLS))}"
        )
    return call
