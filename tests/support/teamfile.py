"""The one team-file builder of the tests: a team of planner, synthesizer and members with the
models a test scripted, written as TOML, or as JSON when the file's name ends in .json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

MEMBERS: list[dict[str, Any]] = [
    {"id": "m1", "name": "Member m1", "description": "collecting facts"},
    {"id": "m2", "name": "Member m2"},
    {"id": "m3", "name": "Member m3"},
]
"""The default team: m1..m3, m1 described (the planner's prompt shows it)."""
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def team_file(
    path: Path,
    models: dict[str, str],
    *,
    members: list[dict[str, Any]] = MEMBERS,
    team_id: str = "coord",
    options: dict[str, Any] | None = None,
    hooks: list[str] | None = None,
    mcp_servers: list[dict[str, Any]] | None = None,
    queue: str | None = None,
) -> Path:
    """Write a team of `members` to `path` and return it. `models` names the "planner" and the
    "synth" and, when it has one, the members' default ("member"); `queue` is the planner's and
    the synthesizer's."""
    team: dict[str, Any] = {"team_id": team_id}
    if "member" in models:
        team["model"] = models["member"]
    on_queue = {} if queue is None else {"queue": queue}
    team["planner"] = {"model": models["planner"], **on_queue}
    team["synthesizer"] = {"model": models["synth"], **on_queue}
    if hooks:
        team["hooks"] = hooks
    if mcp_servers is not None:
        team["mcp_servers"] = mcp_servers
    team["members"] = members
    if options:
        team["options"] = options
    path.write_text(json.dumps(team) if path.suffix == ".json" else _toml(team))
    return path


def _toml(team: dict[str, Any]) -> str:
    """`team` as TOML: its scalars and lists first, then a table per dict, an array of tables
    per list of dicts (TOML wants every plain key of the top level before the first table)."""
    lines, tables = [], []
    for key, value in team.items():
        if isinstance(value, dict):
            tables += [f"[{key}]", *_pairs(value)]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                tables += [f"[[{key}]]", *_pairs(item)]
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    return "\n".join(lines + tables) + "\n"


def _pairs(table: dict[str, Any]) -> list[str]:
    return [f"{_key(key)} = {_value(value)}" for key, value in table.items()]


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    """A TOML value: JSON's spelling of strings, numbers and booleans is TOML's too."""
    if isinstance(value, dict):
        return "{ " + ", ".join(_pairs(value)) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    return json.dumps(value)
