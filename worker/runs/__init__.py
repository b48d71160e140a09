"""A planned run's work on a worker: a member's attempt at a claimed task (its session, claims,
heartbeat, inbox reads and team tools), and the coordinator's calls made where the keys are
(model calls, MCP listings, Python tool checks)."""
