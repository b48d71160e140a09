"""The run's cache of its MCP servers' tool lists (RunKeys.mcp_tools), written by the first
worker that lists a server, so that the planner and every dispatch input name the same tools;
and the notes of the job that lists them for the planner (RunKeys.mcp_listing)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from pydantic import BaseModel
from teamctl.shared.agent.mcp_config import offered_name, tool_filter
from teamctl.shared.agent.tool_names import TOOL_NAME
from teamctl.shared.keys import RunKeys
from teamctl.shared.redis.scripts import GuardedScripts, Scripts
from teamctl.shared.text import shorten

SUMMARY_CHARS = 120
"""How much of a tool's description the planner is shown (its first line)."""


class McpListing(BaseModel):
    """What the planner's listing job found for one server (written by a worker, read by the
    coordinator): listed (its tools are in the cache), or the error that stopped it."""

    listed: bool
    error: str | None = None
    worker: str = ""


@dataclass(frozen=True)
class OfferedTool:
    """A member's MCP tool as the planner is told of it: its offered name and a summary."""

    name: str
    summary: str


class McpToolCache:
    """Tool lists per server of one run: each tool's name, description and input schema, and
    whether its server marks it read-only or idempotent (ListedTool.as_json)."""

    def __init__(self, conn: redis.Redis, keys: RunKeys, scripts: Scripts | GuardedScripts) -> None:
        self.conn = conn
        self.keys = keys
        self.scripts = scripts

    def remember(self, server: str, tools: Iterable[Mapping[str, Any]]) -> None:
        """Keep `server`'s list unless a worker already did (the first listing wins)."""
        self.scripts["mcp_cache_remember"](
            keys=[self.keys.mcp_tools, self.keys.spec], args=[server, json.dumps(list(tools))]
        )

    def lists(self) -> dict[str, list[dict[str, Any]]]:
        """Every cached list, by server name."""
        return {
            server: json.loads(raw)
            for server, raw in self.conn.hgetall(self.keys.mcp_tools).items()
        }

    def member_tools(self, entries: list[str], servers: Iterable[str]) -> list[str]:
        """The names a member's MCP tools are offered under, from the cached lists of its
        servers (a server not listed yet contributes none)."""
        return [tool.name for tool in offered_tools(self.lists(), entries, servers)]

    def note_listing(self, server: str, listing: McpListing) -> None:
        """Record the listing job's outcome for `server` and wake the coordinator."""
        self.scripts["mcp_listing_note"](
            keys=[self.keys.mcp_listing, self.keys.mcp_listed, self.keys.spec],
            args=[server, listing.model_dump_json()],
        )

    def listings(self) -> dict[str, McpListing]:
        """The listing job's outcomes so far, by server name."""
        return {
            server: McpListing.model_validate_json(raw)
            for server, raw in self.conn.hgetall(self.keys.mcp_listing).items()
        }


def offered_tools(
    lists: Mapping[str, list[dict[str, Any]]], entries: list[str], servers: Iterable[str]
) -> list[OfferedTool]:
    """A member's MCP tools as offered (`server__tool`, in each server's order), from the cached
    `lists` of its servers, as the worker's toolbox filters them (entries, valid names)."""
    offered = []
    for server in servers:
        allowed = tool_filter(entries, server)
        for tool in lists.get(server, []):
            name = offered_name(server, tool["name"])
            if (allowed is None or tool["name"] in allowed) and TOOL_NAME.fullmatch(name):
                summary = (tool.get("description") or "").strip().split("\n", 1)[0]
                offered.append(OfferedTool(name, shorten(summary, SUMMARY_CHARS)))
    return offered
