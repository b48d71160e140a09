"""The run's cache of its MCP servers' tool lists (RunKeys.mcp_tools), written by the first
worker that lists a server, so that every dispatch input names the same tools."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import redis
from teamctl.shared.agent.mcp_config import offered_name, tool_filter
from teamctl.shared.agent.python_tools import TOOL_NAME
from teamctl.shared.keys import RunKeys
from teamctl.shared.scripts import Scripts


class McpToolCache:
    """Tool lists per server of one run."""

    def __init__(self, conn: redis.Redis, keys: RunKeys, scripts: Scripts) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts

    def remember(self, server: str, tools: Iterable[Mapping[str, Any]]) -> None:
        """Keep `server`'s list unless a worker already did (the first listing wins)."""
        self.scripts["mcp_cache_remember"](keys=[self.keys.mcp_tools, self.keys.spec],
                                           args=[server, json.dumps(list(tools))])

    def lists(self) -> dict[str, list[dict[str, Any]]]:
        """Every cached list, by server name."""
        return {server: json.loads(raw)
                for server, raw in self.conn.hgetall(self.keys.mcp_tools).items()}

    def member_tools(self, entries: list[str], servers: Iterable[str]) -> list[str]:
        """The names a member's MCP tools are offered under, from the cached lists of its
        servers (a server not listed yet contributes none)."""
        lists = self.lists()
        names = []
        for server in servers:
            allowed = tool_filter(entries, server)
            for tool in lists.get(server, []):
                name = offered_name(server, tool["name"])
                if (allowed is None or tool["name"] in allowed) and TOOL_NAME.fullmatch(name):
                    names.append(name)
        return names
