"""A stdio MCP server for the tests, written with the SDK (no tests here): a tool whose result
has only structured content, one that fails with a text of any length, one that never answers,
one that kills the server mid-call, one that tells the server's environment and HOME, and two
annotated safe to repeat (read-only, idempotent). With --no-list it answers the handshake but
never tools/list.
Usage: python -m tests.mcp_fixture.stdio_server [--no-list]"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ToolAnnotations


class NeverLists(MCPServer):
    """Handshakes like any server, then leaves tools/list unanswered."""

    async def list_tools(self) -> list[Any]:
        await anyio.sleep(3600)
        return []


server = (NeverLists if "--no-list" in sys.argv else MCPServer)("index")


@server.tool()
def call_key(ctx: Context) -> str:
    """The idempotency key the call's request carried in its _meta."""
    return str((ctx.request_context.meta or {}).get("teamctl/idempotency_key"))


@server.tool()
def stats() -> CallToolResult:
    """Counts of the index, as structured content only (no text block)."""
    return CallToolResult(content=[], structured_content={"documents": 42, "terms": 7})


@server.tool()
def fail_loudly(chars: int) -> str:
    """Fail with an error text of `chars` characters (a ToolError: the SDK sends its text)."""
    raise ToolError("e" * chars)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep(3600)
    return "late"


@server.tool()
def environment() -> dict[str, Any]:
    """The server's environment variables, and the mode of its HOME directory."""
    return {"env": dict(os.environ), "home_mode": oct(os.stat(os.environ["HOME"]).st_mode & 0o777)}


@server.tool()
def crash() -> str:
    """Kill the server while the call is in flight."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(term: str) -> str:
    """Look a term up (annotated read-only)."""
    return f"{term}: 3 documents"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=False))
def reindex(document: str) -> str:
    """Index a document again (annotated idempotent: twice is as once)."""
    return f"{document} indexed"


if __name__ == "__main__":
    server.run(transport="stdio")
