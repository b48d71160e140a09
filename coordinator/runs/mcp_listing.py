"""The members' MCP tools as the planner is told of them.

They come from the run's cache of tool lists (shared/runs/mcp_cache.py). Before the first plan no
attempt has started a server, so when the cache lacks one the coordinator, which starts no
server and never imports the SDK, enqueues one job per queue (`run_mcp_listing`) on the
queue of the members that use it and waits for its notes at most mcp_start_timeout_s +
mcp_list_timeout_s; what is not listed by then is shown as configured. A team without MCP
servers pays nothing: no job and no Redis round trip.
"""

from __future__ import annotations

import time

from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.worker_wait import WorkerWait
from teamctl.shared.runs.mcp_cache import McpListing, McpToolCache, OfferedTool, offered_tools
from teamctl.shared.team_file import Member
from teamctl.shared.text import flat, shorten

REASON_CHARS = 200
"""How much of each line of a server's start error the fallback's stderr line repeats (its
first line, and its stderr tail's last)."""


class McpListingWait:
    """Fills the run's MCP cache for the planner through a worker, within a bounded wait."""

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.cache = McpToolCache(ctx.run.conn, ctx.run.keys, ctx.run.scripts)

    def member_tools(
        self, members: list[Member], run_deadline: float
    ) -> dict[str, list[OfferedTool]]:
        """Each member's real MCP tools by member id, for the members all of whose servers
        are listed (listing them first if needed); the others are left to their entries."""
        wanted = _servers_by_queue(members)
        if not wanted:
            return {}
        lists = self.cache.lists()
        missing = {
            queue: [name for name in names if name not in lists] for queue, names in wanted.items()
        }
        missing = {queue: names for queue, names in missing.items() if names}
        if missing:
            lists = self._list(missing, run_deadline)
        return {
            m.id: offered_tools(lists, m.mcp, [s.name for s in m.mcp_servers])
            for m in members
            if m.mcp_servers and all(s.name in lists for s in m.mcp_servers)
        }

    def _list(
        self, missing: dict[str, list[str]], run_deadline: float
    ) -> dict[str, list[dict[str, object]]]:
        """Enqueue the listing jobs, wait for their notes, say what falls back; the lists."""
        options = self.ctx.run.spec.options
        budget_s = options.mcp_start_timeout_s + options.mcp_list_timeout_s
        servers = [name for names in missing.values() for name in names]
        # A note or wake-up left by an earlier coordinator's job would end (or spin) this wait
        # before ours runs.
        pipe = self.ctx.run.conn.pipeline()
        pipe.hdel(self.ctx.run.keys.mcp_listing, *servers)
        pipe.delete(self.ctx.run.keys.mcp_listed)
        pipe.execute()
        jobs = [
            self.ctx.dispatcher.enqueue_mcp_listing(names, queue)
            for queue, names in missing.items()
        ]
        listings, jobs_ended = self._await(
            servers, list(missing), jobs, budget_s, min(run_deadline, time.monotonic() + budget_s)
        )
        lists = self.cache.lists()
        self._note_fallback([s for s in servers if s not in lists], listings, budget_s, jobs_ended)
        return lists

    def _await(
        self,
        servers: list[str],
        queues: list[str],
        jobs: list[str],
        budget_s: float,
        deadline: float,
    ) -> tuple[dict[str, McpListing], bool]:
        """The jobs' notes once every server has one, every job ended (one that failed or
        vanished before noting leaves nothing more to wait for: then True), or at the deadline
        or a cancel."""
        wait = WorkerWait(self.ctx, deadline)
        while True:
            listings = self.cache.listings()
            # A cancel ends this wait quietly: the planner's call, next, ends the run.
            if all(s in listings for s in servers) or wait.timed_out() or wait.cancelled():
                return listings, False
            # A started job lists for at most the budget: only a stuck one is older.
            if len(self.ctx.dispatcher.ended(jobs, stale_after_s=budget_s)) == len(jobs):
                return self.cache.listings(), True  # with notes written just before the end
            wait.check_lease()
            wait.hint_if_unserved(queues)
            wait.sleep(self.ctx.run.keys.mcp_listed, stop_at_deadline=True)

    def _note_fallback(
        self,
        unlisted: list[str],
        listings: dict[str, McpListing],
        budget_s: float,
        jobs_ended: bool,
    ) -> None:
        """One stderr line naming the servers the planner sees only as configured, and why."""
        if not unlisted:
            return
        reasons = []
        for name in unlisted:
            listing = listings.get(name)
            if listing is None and jobs_ended:
                reasons.append(
                    f"{name}: its listing job ended without listing it (the worker's log says why)"
                )
            elif listing is None:
                reasons.append(
                    f"{name}: not listed within mcp_start_timeout_s + "
                    f"mcp_list_timeout_s = {budget_s:g}s"
                )
            else:
                reasons.append(f"{name}: {_reason(listing.error)}")
        self.ctx.reporter.note(
            "the planner sees the configured MCP entries, not the tools, of " + "; ".join(reasons)
        )


def _reason(error: str | None) -> str:
    """A listing's error on one line: its first line and, when it has more (a stderr tail),
    its last, which says why (the first alone would end at "its stderr ends:")."""
    lines = [line for line in map(flat, (error or "").splitlines()) if line] or ["not listed"]
    kept = lines[:1] + lines[1:][-1:]
    return " ".join(shorten(line, REASON_CHARS) for line in kept)


def _servers_by_queue(members: list[Member]) -> dict[str, list[str]]:
    """The MCP servers the members use, each once, under the queue of its first member (the
    workers there are the ones that must be able to start it)."""
    by_queue: dict[str, list[str]] = {}
    seen: set[str] = set()
    for member in members:
        for server in member.mcp_servers:
            if server.name not in seen:
                seen.add(server.name)
                by_queue.setdefault(member.queue, []).append(server.name)
    return by_queue
