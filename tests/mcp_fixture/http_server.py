"""A streamable HTTP MCP server for the tests, written with the SDK (no tests here): a tool with
structured output, one that reports the request's Authorization header, one that crashes the
server mid-call and one that never answers. Usage: python -m tests.mcp_fixture.http_server PORT"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

server = MCPServer("docs")


class Entry(BaseModel):
    """What lookup answers."""

    term: str
    meaning: str


@server.tool()
def lookup(term: str) -> Entry:
    """Look a term up in the glossary."""
    return Entry(term=term, meaning=f"{term} means what the glossary says")


@server.tool()
def whoami(ctx: Context) -> str:
    """Which Authorization header the request carried."""
    return f"authorization={(ctx.headers or {}).get('authorization')}"


@server.tool()
def crash() -> str:
    """Kill the server while the call is in flight."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "late"


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
