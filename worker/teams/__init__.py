"""A persistent team's work on a worker: one teammate's turn, its team tools, and its own
workspace, Python and MCP tools behind the plan-mode gate."""
