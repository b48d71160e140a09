"""MCP servers the tests start (`python -m tests.mcp_fixture.http_server PORT`)."""
