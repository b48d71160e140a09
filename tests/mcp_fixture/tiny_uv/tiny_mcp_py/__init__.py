"""One JSON-RPC message a line: the handshake, tools/list and a `pid` tool, nothing more."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def answer(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The result of one request; LookupError for a method it does not know."""
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "tiny", "version": "1.0.0"},
        }
    if method == "tools/list":
        schema = {"type": "object", "properties": {}}
        pid = {"name": "pid", "description": "The server's pid.", "inputSchema": schema}
        return {"tools": [pid]}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": str(os.getpid())}]}
    raise LookupError(method)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue  # a notification
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
        try:
            reply["result"] = answer(message.get("method", ""), message.get("params") or {})
        except LookupError:
            reply["error"] = {"code": -32601, "message": "no such method"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
