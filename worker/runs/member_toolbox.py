"""A member's tools for one attempt, and what they hold open while it runs.

Workspace tools come first, then the team tools (AI4J's order) as the run allows, then the
member's Python tools and its MCP servers' tools. Building them may open an inbox reader, a copy
of a workspace kept in Redis and MCP server processes; the attempt uses the first two to settle
its reads and push its files, and closes all of them when it ends.
"""

from __future__ import annotations

import os
from pathlib import Path

from teamctl.shared.agent.mcp_tools import McpSessions, McpTimeouts, add_mcp_tools
from teamctl.shared.agent.python_tools import ToolContext, add_python_tools
from teamctl.shared.agent.tool_names import RESERVED_PREFIX
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.process.hosts import this_host
from teamctl.shared.runs.mcp_cache import McpToolCache
from teamctl.shared.team_file import Member
from teamctl.shared.tracing import Span
from teamctl.shared.workspace.caps import check_workspace_host
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import Fence, WorkspaceFiles
from teamctl.shared.workspace.tools import add_workspace_tools
from teamctl.worker.mcp_warm.client import Warmth, kept_workspace_root, mcp_sessions
from teamctl.worker.mcp_warm.protocol import Scope
from teamctl.worker.runs.claims import Claim
from teamctl.worker.runs.job_context import JobContext
from teamctl.worker.runs.mailbox import Mailbox
from teamctl.worker.runs.member_tools import MemberToolContext, add_member_tools


class MemberToolbox:
    """Builds one claim's member tools and keeps what they opened, for the attempt to use and
    then close."""

    def __init__(self, job: JobContext, claim: Claim) -> None:
        self.job = job
        self.claim = claim
        self.mailbox: Mailbox | None = None
        """This session's reads of its member's inbox, when it has the team tools."""
        self.mirror: WorkspaceMirror | None = None
        """This session's copy of a workspace kept in Redis, when its member has tools."""
        self.mcp: McpSessions | None = None
        """This session's MCP servers, when its member has some (warm ones stay open for the
        run's next attempts: worker/mcp_warm)."""

    def build(self, member: Member, span: Span) -> Toolbox:
        """The member's tools, traced under `span` (a Python tool that will not import here,
        or an MCP server that will not start, fails the attempt)."""
        run, options = self.job.run, self.job.run.spec.options
        toolbox = Toolbox(trace=span, max_result_chars=options.tool_result_max_chars)
        add_workspace_tools(toolbox, Workspace(self._workspace_root(member)), member.tools)
        if options.enable_member_team_tools:
            self.mailbox = Mailbox(run.bus, member.id, self.claim, trace=span)
            add_member_tools(
                toolbox,
                MemberToolContext(
                    board=run.board,
                    bus=run.bus,
                    member_ids=[m.id for m in run.spec.members],
                    member_id=member.id,
                    claim=self.claim,
                    claims=self.job.claims,
                    worker=self.job.worker,
                    heartbeat_ttl_s=options.heartbeat_ttl_s,
                    mailbox=self.mailbox,
                    max_task_releases=options.max_task_releases,
                    result_max_chars=options.tool_result_max_chars,
                    trace=span,
                ),
            )
        add_python_tools(
            toolbox,
            member.tools,
            self._tool_context(member),
            options.tool_result_max_chars,
            timeout_s=options.tool_wait_s,
        )
        if member.mcp_servers:
            self._add_mcp_tools(toolbox, member)
        if self.mirror:  # every tool but the team's may change files: each call syncs them
            self.mirror.guard(
                toolbox, [name for name in toolbox.names if not name.startswith(RESERVED_PREFIX)]
            )
        return toolbox

    def close(self) -> None:
        """Stop the attempt's own MCP servers (leave warm ones to the worker's keeper), then
        drop the workspace copy they worked in."""
        if self.mcp:
            self.mcp.close()
        if self.mirror:  # after the MCP servers, which work in it
            self.mirror.close()

    def _workspace_root(self, member: Member) -> Path:
        """Where the member's tools work: the run's directory (WorkspaceElsewhere when it is on
        another host), or for a workspace kept in Redis a copy fetched now (only for a member
        with tools: nobody else reads files), in the run's directory beside the worker's MCP
        keeper when the member has MCP servers, else in a private one."""
        run, claim = self.job.run, self.claim
        spec = run.spec
        if not (member.tools or member.mcp_servers):
            return Path(spec.workspace_dir)
        if spec.workspace_store == "local":
            check_workspace_host(f"run {spec.run_id}", spec.workspace_host, this_host())
            return Path(spec.workspace_dir)
        if self.mirror is None:
            self.mirror = WorkspaceMirror.open(
                WorkspaceFiles(
                    run.conn,
                    run.keys,
                    spec.options.file_caps,
                    Fence("task", run.keys.task(claim.task_id), str(claim.token)),
                ),
                # Copied where its MCP servers can stay warm for the run's next attempts.
                kept_workspace_root(os.environ, self._scope()) if member.mcp_servers else None,
            )
        return self.mirror.root

    def _scope(self) -> Scope:
        return Scope(kind="run", id=self.job.run.run_id)

    def _add_mcp_tools(self, toolbox: Toolbox, member: Member) -> None:
        """Start the member's MCP servers in the run's workspace and offer their tools; the run
        caches each server's list for dispatch inputs. One that will not start fails the task."""
        run = self.job.run
        options = run.spec.options
        root = self._workspace_root(member)
        # A private copy of a workspace kept in Redis goes with its attempt: so do its servers.
        private_copy = self.mirror is not None and not self.mirror.kept
        self.mcp = mcp_sessions(
            os.environ,
            root,
            McpTimeouts(
                options.mcp_start_timeout_s, options.mcp_list_timeout_s, options.mcp_call_timeout_s
            ),
            f"{run.run_id}:{self.claim.task_id}",
            None if private_copy else Warmth(self._scope(), options.mcp_idle_s, tuple(member.mcp)),
        )
        cache = McpToolCache(run.conn, run.keys, run.scripts)
        for server in member.mcp_servers:
            tools = self.mcp.start(server)
            cache.remember(server.name, [tool.as_json() for tool in tools])
            add_mcp_tools(
                toolbox, self.mcp, server, tools, member.mcp, options.tool_result_max_chars
            )

    def _tool_context(self, member: Member) -> ToolContext:
        """What this attempt's Python tools may know; their heartbeat refreshes its claim."""
        job, claim = self.job, self.claim
        return ToolContext(
            member_id=member.id,
            workspace=self._workspace_root(member),
            heartbeat=lambda: job.beat.refresh(claim),
            run_id=job.run.run_id,
            task_id=claim.task_id,
            team_id=job.run.spec.team_id,
        )
