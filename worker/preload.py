"""What a worker imports and prepares before its first job, in two parts: what a run's first
jobs need (RQ, the job modules, litellm warmed up: the planner's model call), and the rest (the
persistent teams' turn job, the MCP SDK's client: ~0.4 s of CPU).

A preloaded parent (worker/fork_server.py) can fork a run's first worker between the two, and
that worker's settings module (worker/settings.py) then skips the rest: its jobs import what
they need of it themselves, as a worker without a preload would. Imports stay inside the
functions: the fork server names this module before it preloads anything.
"""

from __future__ import annotations

DEFERRED_ENV = "TEAMCTL_PRELOAD_DEFERRED"
"""Set by the fork server in a worker it forked before its parent had imported the rest
(preload_rest); the settings module reads and removes it before anything else starts."""


def preload_for_planning() -> None:
    """Import and prepare what a run's first jobs need: RQ's command line, the job modules,
    litellm (its lazy first-call costs paid too), the runs' prompt templates, the tools'
    schemas and the Lua sources."""
    import rq.cli.cli  # noqa: F401
    import teamctl.worker.jobs  # noqa: F401
    import teamctl.worker.rq_bootstrap  # noqa: F401
    from teamctl.shared.agent.litellm_warmup import warm_up
    from teamctl.shared.agent.llm import load_litellm
    from teamctl.shared.agent.prompts import precompile
    from teamctl.shared.agent.tools import precompute_schemas
    from teamctl.shared.redis.scripts import sources

    warm_up(load_litellm())
    precompile("teamctl.worker.runs")
    precompute_schemas()  # the tools' JSON schemas, sent with every model call
    sources()  # the Lua scripts' text, read from the package once


def preload_rest() -> None:
    """Import what the other jobs need: the persistent teams' turn job and its templates, and
    the MCP SDK's client (~0.3 s an import) for members with MCP servers."""
    import teamctl.worker.teams.turn  # noqa: F401
    from teamctl.shared.agent.mcp_tools import preload_sdk
    from teamctl.shared.agent.prompts import precompile

    preload_sdk()
    precompile("teamctl.worker.teams")
