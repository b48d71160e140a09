"""The HTTP MCP server of http_server.py behind redirects, for the tests (no tests here): a call
of `moved` is answered with a 307 to another origin (TARGET, another loopback port), every
request to /old/mcp with a 307 to /mcp (the same origin), and every request to /away/mcp with a
307 to TARGET. `api_key` reports the X-Api-Key header
the call carried. Usage: python -m tests.mcp_fixture.redirect_server PORT TARGET"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import Context

from tests.mcp_fixture.http_server import server


@server.tool()
def moved() -> str:
    """Answered by a redirect to another origin (never reached here)."""
    return "not moved"


@server.tool()
def api_key(ctx: Context) -> str:
    """Which X-Api-Key header the request carried."""
    return f"x-api-key={(ctx.headers or {}).get('x-api-key')}"


class Redirecting:
    """ASGI middleware: the redirects the module docstring names, else the MCP app."""

    def __init__(self, app: Any, target: str) -> None:
        self.app = app
        self.target = target

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] in ("/old/mcp", "/away/mcp"):
            await _redirect(send, "/mcp" if scope["path"] == "/old/mcp" else self.target)
            return
        received = []
        body = b""
        while True:
            message = await receive()
            received.append(message)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if b'"tools/call"' in body and b'"moved"' in body:
            await _redirect(send, self.target)
            return

        async def replay() -> Any:
            return received.pop(0) if received else await receive()

        await self.app(scope, replay, send)


async def _redirect(send: Any, location: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 307,
            "headers": [(b"location", location.encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


if __name__ == "__main__":
    app = Redirecting(server.streamable_http_app(host="127.0.0.1"), sys.argv[2])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
