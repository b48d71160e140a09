"""The lead agent of a persistent team: its memory in Redis and its turns.

The lead's conversation lives in `lead:memory`, its inbox offset in the team's read offsets
under 'lead'. Before every model call the lead's unread mail is peeked (never drained) and
appended to that step's user message as one `<inbox>` block; the step's messages and the offset
past that mail are then committed together by one Lua script fenced by the lead lease. So a lead
killed mid-step, restarted once its lease expired, sees exactly the mail it never committed, and
continues the conversation it had. Tool calls run before their step is committed: a tool whose
step was lost with the lead may have acted (a spawn, a message) without the memory knowing. Each
turn that calls the model marks, fenced by the lease, where it begins and how it ends, so the
memory reads turn by turn (`teamctl team transcript lead`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teamctl.coordinator.teams.lead_tools import LeadTools
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.loop import AgentLoop, Stop, tool_results
from teamctl.shared.agent.model_caller import Message
from teamctl.shared.agent.prompts import render
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.agent.tracing_caller import TracingCaller
from teamctl.shared.bus import LEAD
from teamctl.shared.errors import BudgetSpent, RunFailed
from teamctl.shared.lease import LeadLease
from teamctl.shared.process.private_files import private_dir
from teamctl.shared.providers.limits import CallScope
from teamctl.shared.teams.inbox import unread_batch
from teamctl.shared.teams.team_base import BudgetSpent as TeamBudgetSpent
from teamctl.shared.teams.team_fallbacks import team_caller
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import IdleReason
from teamctl.shared.teams.transcripts import mark_turn
from teamctl.shared.text import shorten
from teamctl.shared.tracing import NO_TRACING, Span, Tracing
from teamctl.shared.workspace.directory import Workspace
from teamctl.shared.workspace.mirror import WorkspaceMirror
from teamctl.shared.workspace.redis_files import Fence, WorkspaceFiles
from teamctl.shared.workspace.tools import add_workspace_tools

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
        return [
            json.loads(raw) for raw in self.store.conn.lrange(self.store.keys.lead_memory, 0, -1)
        ]

    def commit(self, offset_id: str, messages: list[dict[str, Any]], *, reset: bool = False) -> int:
        """Append a step's messages and move the inbox offset to `offset_id` ('' keeps it), in
        one call fenced by the lease (`reset` clears the memory first); returns how many of
        memory's oldest messages the caps (memory_max_messages, memory_max_chars) dropped.
        RunFailed when another lead holds the lease now (nothing was written)."""
        keys = self.store.keys
        options = self.store.options
        dropped = int(
            self.store.scripts["lead_checkpoint"](
                keys=[keys.lead_lease, keys.lead_memory, keys.read_offsets, keys.lead_memory_size],
                args=[
                    self.owner,
                    "1" if reset else "",
                    offset_id,
                    options.memory_max_messages,
                    options.memory_max_chars,
                    *(json.dumps(m, ensure_ascii=False) for m in messages),
                ],
            )
        )
        if dropped < 0:
            raise RunFailed(
                f"the lead of team {self.store.team} lost its lease (another lead "
                "took over); this one stops without writing"
            )
        return dropped

    def mark(self, kind: str, detail: str) -> bool:
        """Record that a lead turn begins (`detail`: who runs it) or ends (`detail`: how), for
        its transcript, fenced by the lease; False when another lead holds it now (nothing
        written)."""
        return mark_turn(self.store, LEAD, self.owner, kind, detail) is not None

    def start_over(self) -> None:
        """Forget the conversation (`--new`); unread mail stays unread, read mail stays read."""
        self.commit("", [], reset=True)


NOTHING_SAID = "nothing said"
"""Why a lead turn makes no model call: no line from the person and no unread mail."""


@dataclass
class LeadAgent:
    """The lead's model, tools and memory; `turn` runs model steps until a plain answer.
    `workspace` is the team's directory: the lead's own workspace tools (the team option
    `lead_tools`) and those of the teammates it spawns work there. It is the agent loop's
    policy for the lead: before each call it checks its lease and the team's budget and adds
    the unread mail (with the person's line on the first step); after each step's tools it
    commits the step, fenced by its lease."""

    store: TeamStore
    lease: LeadLease
    client: LitellmClient
    model: str
    api_base: str | None
    workspace: Path
    on_step: StepHook | None = None
    tracing: Tracing = NO_TRACING
    """Each of the lead's turns is a trace of its own, linked to the mail it answers."""
    fallbacks: Sequence[str] = ()
    """The lead's fallback models (`--fallback-model`, else the team's `fallbacks`), and
    the default ones of the teammates it spawns."""
    toolbox: Toolbox = field(init=False)
    tools: LeadTools = field(init=False)
    memory: LeadMemory = field(init=False)
    text: str = field(default="", init=False)
    """The person's line the current turn answers."""
    offset: str = field(default="", init=False)
    """The inbox offset past the mail injected into the current step."""
    dropped: int = field(default=0, init=False)
    """Messages the memory caps dropped at the last commit, to drop from the conversation."""
    mirror: WorkspaceMirror | None = field(default=None, init=False)
    """The lead's copy of a workspace the team keeps in Redis, when it has workspace tools."""
    began: bool = field(default=False, init=False)
    """The current turn's begin is marked (it made a model call), its end not yet."""

    def __post_init__(self) -> None:
        self.toolbox = Toolbox(max_result_chars=self.store.options.tool_result_max_chars)
        self.tools = LeadTools(
            self.store, self.model, self.api_base, self.workspace, fallbacks=self.fallbacks
        )
        self.tools.add_to(self.toolbox)
        self.memory = LeadMemory(self.store, self.lease.owner)
        tools = self.store.options.lead_tools
        if tools:  # last: nothing after the mirror opens can fail and leave it behind
            add_workspace_tools(self.toolbox, Workspace(self._workspace_root()), tools)
            if self.mirror:
                self.mirror.guard(self.toolbox, tools)

    def _workspace_root(self) -> Path:
        """Where the lead's workspace tools work: the team's directory, or a copy of a
        workspace the team keeps in Redis (its saves fenced by the lead's lease)."""
        store = self.store
        if store.meta().workspace_store == "redis":
            self.mirror = WorkspaceMirror.open(
                WorkspaceFiles(
                    store.conn,
                    store.keys,
                    store.options.file_caps,
                    Fence("turn", store.keys.lead_lease, self.lease.owner),
                )
            )
            return self.mirror.root
        try:
            private_dir(self.workspace)
        except OSError as exc:  # the tools then fail with a tool error the model can report
            log.warning("the team's workspace %s was not created: %s", self.workspace, exc)
        return self.workspace

    def close(self) -> None:
        """Remove the lead's copy of a workspace kept in Redis (saved after each tool call)."""
        if self.mirror:
            self.mirror.close()

    def turn(self, text: str = "") -> str | None:
        """A turn on the person's `text` and the unread mail; its final answer, or None when
        there was neither (no model call). BudgetSpent before a model call once the team's
        budget is spent (what the turn committed so far stays, the rest of the mail unread)."""
        messages = [{"role": "system", "content": self.system_prompt()}, *self.memory.load()]
        self.text, self.dropped = text.strip(), 0
        max_steps = self.store.options.turn_max_steps
        with self._start_span() as span:
            client = self.client.scoped(
                CallScope(
                    budget=self.store.budget, stop=self.lease.check, on_charge=self.store.charged
                )
            )
            caller = team_caller(self.store, client, LEAD, self.fallbacks)
            try:
                end = AgentLoop(
                    client=TracingCaller(caller, span),
                    model=self.model,
                    api_base=self.api_base,
                    toolbox=self.toolbox,
                    max_steps=max_steps,
                    policy=self,
                ).run(messages)
            except BudgetSpent as exc:  # the call's worst case was not covered: not made
                self._end_turn(IdleReason.BUDGET)
                if not self.store.budget_exceeded():  # so every teammate and the lead pause
                    self.store.budget.mark_spent(str(exc) or "budget spent")
                self.store.refuse_past_budget("the lead makes no model call")
                raise
            except BaseException as exc:  # a model error, an interrupt: the REPL goes on
                self._end_turn(ended_by(exc))
                raise
        self._end_turn(IdleReason.DONE if end.answer is not None else IdleReason.STEP_LIMIT)
        if end.answer is not None:
            return end.answer
        if end.stop == NOTHING_SAID:
            return None
        return (
            f"(the lead stopped after {max_steps} steps (turn_max_steps); send a message to go on)"
        )

    def _start_span(self) -> Span:
        """The turn's span, linked to the spans that sent its unread mail; the tools' calls and
        what they send go under it."""
        links: list[str | None] = []
        if self.tracing.on:
            _, unread = self.store.messages.peek(
                LEAD, limit=self.store.options.inbox_batch_messages
            )
            links = [message.traceparent for message in unread]
        span = self.tracing.start(
            "invoke_agent lead",
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": LEAD,
                "teamctl.team": self.store.team,
                "teamctl.member": LEAD,
                "host.name": socket.gethostname(),
                "process.pid": os.getpid(),
            },
        )
        self.toolbox.trace = self.tools.trace = span
        return span

    def _begin_turn(self) -> None:
        """Mark the turn's begin (its first model call follows); RunFailed once another lead
        holds the lease."""
        if not self.memory.mark("begin", f"{socket.gethostname()}:{os.getpid()}"):
            raise RunFailed(
                f"the lead of team {self.store.team} lost its lease (another lead "
                "took over); this one stops without writing"
            )
        self.began = True

    def _end_turn(self, reason: str) -> None:
        """Mark how a turn that began ends (a lost lease writes nothing)."""
        if self.began:
            self.began = False
            self.memory.mark("end", str(reason))

    # --- the agent loop's policy -------------------------------------------------------------

    def prepare(self, step: int, messages: list[Message]) -> list[Message] | Stop:
        del messages[1 : 1 + self.dropped]  # what memory dropped leaves the next request too
        self.dropped = 0
        self.lease.check()
        batch = unread_batch(self.store, LEAD)  # bounded: the rest waits for the next step
        self.offset = batch.offset
        parts = [self.text] if step == 1 and self.text else []
        if batch.lines:
            parts.append(batch.block())
        if step == 1 and not parts:
            return Stop(NOTHING_SAID)
        self.store.refuse_past_budget("the lead makes no model call")
        if step == 1:
            self._begin_turn()
        # The mail joins the person's message: no invented exchange around it.
        return [{"role": "user", "content": "\n\n".join(parts)}] if parts else []

    def on_reply(self, reply: ModelReply, sent: list[Message]) -> None:
        # The lead's calls count against the team's budget: charged when their slot settled.
        self.lease.check()

    def run_tools(self, reply: ModelReply) -> list[Message]:
        return tool_results(self.toolbox, reply)

    def end_step(self, reply: ModelReply, sent: list[Message]) -> Stop | None:
        self.dropped = self.memory.commit(self.offset, sent)
        if self.on_step is not None:
            self.on_step(sent)
        return None

    def system_prompt(self) -> str:
        return render(
            "teamctl.coordinator.teams",
            "lead_system.md",
            team=self.store.team,
            tools=self.toolbox.names,
            mcp_servers=[server.name for server in self.store.meta().mcp_servers],
        )


def ended_by(exc: BaseException) -> str:
    """How a failed lead turn ended, as a teammate's failed turn says it."""
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exc, TeamBudgetSpent):  # refused before a later step's call
        return IdleReason.BUDGET
    return f"error: {shorten(str(exc) or type(exc).__name__, 120)}"
