"""What a worker imports and prepares before its first job, in two parts: what a run's first
jobs need (RQ, the job modules, litellm's success path warmed up: the planner's model call), and
the rest (litellm's error path and tiktoken's encoding, the persistent teams' turn job, the MCP
SDK's client: ~0.65 s of CPU).

A preloaded parent (worker/fork_server.py) can fork a run's first worker between the two; that
worker (worker/rq_worker.py) does the rest once it has handed its first job over, while the job
runs. Each part runs once per process, and a forked process inherits what its parent ran.
Imports stay inside the functions: the fork server names this module before it preloads
anything.
"""

from __future__ import annotations

import functools
import gc

DEFERRED_ENV = "TEAMCTL_PRELOAD_DEFERRED"
"""Set by the fork server in a worker it forked before its parent had imported the rest
(preload_rest); the settings module reads and removes it before anything else starts."""


@functools.cache
def preload_for_planning() -> None:
    """Import and prepare what a run's first jobs need: RQ's command line, the job modules,
    litellm (the first-call costs of its success path paid too), the runs' prompt templates,
    the tools' schemas and the Lua sources."""
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


@functools.cache
def preload_rest() -> None:
    """Import and prepare what the other jobs need: litellm's error path and tiktoken's encoding
    (~0.25 s a job otherwise), the persistent teams' turn job and its templates, and the MCP
    SDK's client (~0.3 s an import) for members with MCP servers."""
    import teamctl.worker.teams.turn  # noqa: F401
    from teamctl.shared.agent.litellm_warmup import warm_up_rest
    from teamctl.shared.agent.llm import load_litellm
    from teamctl.shared.agent.mcp_tools import preload_sdk
    from teamctl.shared.agent.prompts import precompile

    warm_up_rest(load_litellm())
    preload_sdk()
    precompile("teamctl.worker.teams")


def rest_pending() -> bool:
    """Whether this process ran the first part of the preload and not the rest (a run's first
    worker, forked early); false in one that preloaded nothing (a bare `rq worker`: its jobs
    import what they use)."""
    return (
        bool(preload_for_planning.cache_info().currsize) and not preload_rest.cache_info().currsize
    )


def preload_rest_in_worker() -> None:
    """The rest of the preload in a running worker, as the first part ran: collector off, then
    what it made frozen (it lives as long as the worker), after one collection of what the
    worker made so far (the job in hand's objects are frozen with it: a few KB, once)."""
    gc.collect()  # cheap: the first part's objects are frozen already
    gc.disable()
    try:
        preload_rest()
    finally:
        gc.freeze()
        gc.enable()
