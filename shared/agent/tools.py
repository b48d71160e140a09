"""The tools a member may call; a tool's failure becomes a tool result for the model."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from teamctl.shared.errors import TeamError, ToolFailed

log = logging.getLogger(__name__)

ToolFn = Callable[[dict[str, Any]], dict[str, Any] | str]


class Toolbox:
    """Named tools with their JSON schemas; `call` never raises, it answers the model."""

    def __init__(self) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        self._functions: dict[str, ToolFn] = {}

    def add(self, name: str, description: str, properties: dict[str, dict[str, Any]],
            required: list[str], fn: ToolFn) -> None:
        """Register a tool: its name, description, JSON-schema properties and function."""
        self._schemas[name] = {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}}
        self._functions[name] = fn

    @property
    def names(self) -> list[str]:
        return list(self._schemas)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI-style function schemas, in registration order."""
        return list(self._schemas.values())

    def call(self, name: str, raw_arguments: str, call_id: str = "") -> str:
        """Run a tool; unknown names, bad JSON and tool failures come back as TOOL_ERROR results."""
        fn = self._functions.get(name)
        if fn is None:
            return tool_error(name, call_id, "UnknownTool",
                              f"Unknown tool '{name}'. Available tools: "
                              f"{', '.join(self.names) or '(none)'}")
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return tool_error(name, call_id, "InvalidArguments",
                              f"invalid tool arguments (not JSON: {exc.msg}): {raw_arguments}")
        if not isinstance(arguments, dict):
            return tool_error(name, call_id, "InvalidArguments",
                              f"invalid tool arguments (expected a JSON object): {raw_arguments}")
        try:
            result = fn(arguments)
        except (ToolFailed, TeamError) as exc:
            return tool_error(name, call_id, type(exc).__name__, str(exc))
        except Exception as exc:  # a tool bug must not fail the task: the model hears about it
            log.exception("tool %s raised", name)
            return tool_error(name, call_id, type(exc).__name__, str(exc) or type(exc).__name__)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def tool_error(tool: str, call_id: str, error_type: str, message: str) -> str:
    """AI4J's tool error text: `TOOL_ERROR: {"errorType", "error", "tool", "callId"}`."""
    return "TOOL_ERROR: " + json.dumps(
        {"errorType": error_type, "error": message, "tool": tool, "callId": call_id},
        ensure_ascii=False)


def first_string(arguments: dict[str, Any], *aliases: str) -> str | None:
    """The first alias whose value, as a string, is non-blank after trimming (AI4J firstString)."""
    for alias in aliases:
        value = arguments.get(alias)
        if value is None or isinstance(value, dict | list):
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        text = str(value).strip()
        if text:
            return text
    return None


def string_property(description: str) -> dict[str, str]:
    """Every tool parameter is a described string (as in AI4J's registry)."""
    return {"type": "string", "description": description}
