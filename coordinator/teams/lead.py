"""The lead agent of a persistent team: its memory in Redis and its turns.

The lead's conversation lives in `lead:memory`, its inbox offset in the team's read offsets
under 'lead'. Before every model call the lead's unread mail is peeked (never drained) and
appended to that step's user message as one `<inbox>` block; the step's messages and the offset
past that mail are then committed together by one Lua script fenced by the lead lease. So a lead
killed mid-step, restarted once its lease expired, sees exactly the mail it never committed, and
continues the conversation it had. Tool calls run before their step is committed: a tool whose
step was lost with the lead may have acted (a spawn, a message) without the memory knowing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teamctl.coordinator.teams.lead_tools import LeadTools
from teamctl.shared.agent.inbox import unread_batch
from teamctl.shared.agent.llm import ModelClient
from teamctl.shared.agent.loop import assistant_message, tool_results
from teamctl.shared.agent.prompts import render
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.agent.workspace import Workspace
from teamctl.shared.agent.workspace_tools import add_workspace_tools
from teamctl.shared.bus import LEAD
from teamctl.shared.errors import RunFailed
from teamctl.shared.lease import LeadLease
from teamctl.shared.private_files import private_dir
from teamctl.shared.teams.team_store import TeamStore

log = logging.getLogger(__name__)

StepHook = Callable[[list[dict[str, Any]]], None]
"""Told each committed step's messages (the REPL shows the tool calls on stderr)."""


class LeadMemory:
    """The lead's chat messages in Redis, written only by the holder of the lead lease."""

    def __init__(self, store: TeamStore, owner: str) -> None:
        self.store = store
        self.owner = owner

    def load(self) -> list[dict[str, Any]]:
        """The conversation so far, oldest first."""
        return [json.loads(raw)
                for raw in self.store.conn.lrange(self.store.keys.lead_memory, 0, -1)]

    def commit(self, offset_id: str, messages: list[dict[str, Any]], *,
               reset: bool = False) -> int:
        """Append a step's messages and move the inbox offset to `offset_id` ('' keeps it), in
        one call fenced by the lease (`reset` clears the memory first); returns how many of
        memory's oldest messages the caps (memory_max_messages, memory_max_chars) dropped.
        RunFailed when another lead holds the lease now (nothing was written)."""
        keys = self.store.keys
        options = self.store.options
        dropped = int(self.store.scripts["lead_checkpoint"](
            keys=[keys.lead_lease, keys.lead_memory, keys.read_offsets, keys.lead_memory_size],
            args=[self.owner, "1" if reset else "", offset_id, options.memory_max_messages,
                  options.memory_max_chars,
                  *(json.dumps(m, ensure_ascii=False) for m in messages)]))
        if dropped < 0:
            raise RunFailed(f"the lead of team {self.store.team} lost its lease (another lead "
                            "took over); this one stops without writing")
        return dropped

    def start_over(self) -> None:
        """Forget the conversation (`--new`); unread mail stays unread, read mail stays read."""
        self.commit("", [], reset=True)


@dataclass
class LeadAgent:
    """The lead's model, tools and memory; `turn` runs model steps until a plain answer.
    `workspace` is the team's directory: the lead's own workspace tools (the team option
    `lead_tools`) and those of the teammates it spawns work there."""

    store: TeamStore
    lease: LeadLease
    client: ModelClient
    model: str
    api_base: str | None
    workspace: Path
    on_step: StepHook | None = None
    toolbox: Toolbox = field(init=False)
    memory: LeadMemory = field(init=False)

    def __post_init__(self) -> None:
        self.toolbox = Toolbox()
        LeadTools(self.store, self.model, self.api_base, self.workspace).add_to(self.toolbox)
        tools = self.store.options.lead_tools
        if tools:
            try:
                private_dir(self.workspace)
            except OSError as exc:  # the tools then fail with a tool error the model can report
                log.warning("the team's workspace %s was not created: %s", self.workspace, exc)
            add_workspace_tools(self.toolbox, Workspace(self.workspace), tools)
        self.memory = LeadMemory(self.store, self.lease.owner)

    def turn(self, text: str = "") -> str | None:
        """A turn on the person's `text` and the unread mail; its final answer, or None when
        there was neither (no model call). BudgetSpent before a model call once the team's
        budget is spent (what the turn committed so far stays, the rest of the mail unread)."""
        messages = [{"role": "system", "content": self.system_prompt()}, *self.memory.load()]
        for step_index in range(self.store.options.turn_max_steps):
            self.lease.check()
            batch = unread_batch(self.store, LEAD)  # bounded: the rest waits for the next step
            parts = [text.strip()] if step_index == 0 and text.strip() else []
            if batch.lines:
                parts.append(batch.block())
            if step_index == 0 and not parts:
                return None
            # The mail joins the person's message: no invented exchange around it.
            step = [{"role": "user", "content": "\n\n".join(parts)}] if parts else []
            self.store.refuse_past_budget("the lead makes no model call")
            reply = self.client.complete(self.model, messages + step,
                                         tools=self.toolbox.schemas(), api_base=self.api_base)
            self.store.charge(reply.usage)  # the lead's calls count against the team's budget
            self.lease.check()
            step.append(assistant_message(reply))
            step.extend(tool_results(self.toolbox, reply))
            dropped = self.memory.commit(batch.offset, step)
            messages.extend(step)
            del messages[1:1 + dropped]  # what memory dropped leaves the next request too
            if self.on_step is not None:
                self.on_step(step)
            if not reply.tool_calls:
                return reply.content or ""
        return (f"(the lead stopped after {self.store.options.turn_max_steps} steps "
                "(turn_max_steps); send a message to go on)")

    def system_prompt(self) -> str:
        return render("teamctl.coordinator.teams", "lead_system.md", team=self.store.team,
                      tools=self.toolbox.names,
                      mcp_servers=[server.name for server in self.store.meta().mcp_servers])
