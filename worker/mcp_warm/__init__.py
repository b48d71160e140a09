"""MCP sessions a worker keeps warm across the attempts and turns of one run or team."""
