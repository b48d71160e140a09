"""The tools a member may call; a tool's failure becomes a tool result for the model."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from shared.errors import ToolFailed

ToolFn = Callable[[dict[str, Any]], dict[str, Any] | str]


class Toolbox:
    """Named tools with their JSON schemas; `call` never raises, it answers the model."""

    def __init__(self) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        self._functions: dict[str, ToolFn] = {}

    def add(self, name: str, description: str, properties: dict[str, dict[str, Any]],
            required: list[str], fn: ToolFn) -> None:
        self._schemas[name] = {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required}}}
        self._functions[name] = fn

    @property
    def names(self) -> list[str]:
        return list(self._schemas)

    def schemas(self) -> list[dict[str, Any]]:
        return list(self._schemas.values())

    def call(self, name: str, raw_arguments: str) -> str:
        """Run a tool; unknown names, bad JSON and ToolFailed come back as error results."""
        fn = self._functions.get(name)
        if fn is None:
            return _error(name, f"Unknown tool '{name}'. Available tools: "
                                f"{', '.join(self.names) or '(none)'}")
        try:
            arguments = json.loads(raw_arguments) if raw_arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return _error(name, f"invalid tool arguments (not JSON: {exc.msg}): {raw_arguments}")
        if not isinstance(arguments, dict):
            return _error(name, "invalid tool arguments: expected a JSON object")
        try:
            result = fn(arguments)
        except ToolFailed as exc:
            return _error(name, str(exc))
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _error(tool: str, message: str) -> str:
    return "TOOL_ERROR: " + json.dumps({"tool": tool, "error": message}, ensure_ascii=False)
