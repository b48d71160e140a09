"""The job that lists a run's MCP servers for its planner: start each server the coordinator
names, keep its tool list in the run's cache, stop it, and note the outcome (the coordinator,
which never imports the SDK, waits for those notes)."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from teamctl.shared.agent.mcp_caches import caches_from_env
from teamctl.shared.agent.mcp_config import McpServer
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts
from teamctl.shared.errors import ConfigError
from teamctl.shared.process.hosts import this_host
from teamctl.shared.redis.connection import set_outage
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.mcp_cache import McpListing, McpToolCache
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.text import shorten

log = logging.getLogger(__name__)


def execute_mcp_listing(conn: redis.Redis, run_id: str, servers: list[str], worker: str) -> str:
    """List each of `servers` (one hub, one server at a time) into the run's cache and note
    each outcome; the job's summary."""
    run = RunHandle(conn, run_id)
    spec = run.spec
    set_outage(conn, spec.options.redis_outage_s)
    if run.store.state().finished:
        return "skipped: the run ended"
    cache = McpToolCache(conn, run.keys, run.scripts)
    configured = _configured(spec)
    options = spec.options
    listed = 0
    with (
        _listing_dir(spec) as root,
        McpHub(
            root,
            McpTimeouts(
                options.mcp_start_timeout_s, options.mcp_list_timeout_s, options.mcp_call_timeout_s
            ),
            package_caches=caches_from_env(os.environ),  # what npx fetches here, members reuse
        ) as hub,
    ):
        for name in servers:
            listing = _list_one(hub, cache, configured.get(name), name, worker)
            cache.note_listing(name, listing)
            listed += listing.listed
    return f"listed {listed} of {len(servers)} MCP servers"


@contextmanager
def _listing_dir(spec: RunSpec) -> Iterator[Path]:
    """Where the servers start to be listed: the run's directory on the host that holds it, or
    an empty one of their own (listing reads no file, and this host may hold none)."""
    if spec.workspace_store == "local" and spec.workspace_host in (None, this_host()):
        yield Path(spec.workspace_dir)
        return
    with tempfile.TemporaryDirectory(prefix="teamctl-listing-") as root:
        yield Path(root)


def _list_one(
    hub: McpHub, cache: McpToolCache, server: McpServer | None, name: str, worker: str
) -> McpListing:
    """Start `server` and cache its tools; any failure is the outcome, never the job's."""
    if server is None:
        return McpListing(
            listed=False, error=f"no member of the run uses MCP server {name!r}", worker=worker
        )
    try:
        tools = hub.start(server)
    except ConfigError as exc:  # will not start, handshake or list in time (stderr tail)
        return McpListing(listed=False, error=str(exc), worker=worker)
    except Exception as exc:  # a bug here must reach the coordinator's note, not only a log
        log.exception("listing MCP server %s failed", name)
        return McpListing(
            listed=False, error=f"{type(exc).__name__}: {shorten(str(exc))}", worker=worker
        )
    cache.remember(name, [tool.as_json() for tool in tools])
    return McpListing(listed=True, worker=worker)


def _configured(spec: RunSpec) -> dict[str, McpServer]:
    """The run's MCP servers by name, as its members carry them."""
    return {server.name: server for member in spec.members for server in member.mcp_servers}
