"""One turn of a persistent teammate, as one RQ job: the teammate is data in Redis,
so any worker may play its next turn.

The job carries only ids. It takes the teammate's turn lease (`turn_begin.lua`), keeps it alive
from a daemon thread, and runs model steps from the memory in Redis. Before every model call
the unread inbox is injected as one `<inbox>` user block, peeked, never drained. A step commits
twice, each time token-checked: the inbox block, the model's reply and the inbox offset before
any tool runs, then the tool results, while each tool call's team writes are recorded with their
outcome in the scripts that make them. So a turn killed mid-step reruns from its last checkpoint
(team_reconcile.lua): every message enters memory exactly once, and a reply's tool calls run
again with their team writes replayed, not repeated. The turn ends through `turn_end.lua`,
which either goes on (mail arrived) or sets the teammate idle and tells the lead. Each turn also
marks, token-checked, where it begins and how it ends, so its memory reads turn by turn
(`teamctl team transcript`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.loop import AgentLoop, Stop, assistant_message
from teamctl.shared.agent.model_caller import Message
from teamctl.shared.agent.prompts import render
from teamctl.shared.agent.python_tools import abandoned_tool_calls
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.agent.tool_names import TEAMMATE_TOOLS, WORKSPACE_TOOLS
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.agent.tracing_caller import TracingCaller
from teamctl.shared.budget import Charge
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import BudgetSpent, ConfigError
from teamctl.shared.providers.limits import CallScope, Waiting, worker_limits
from teamctl.shared.redis.scripts import GuardedScripts
from teamctl.shared.settings import Settings, load_settings
from teamctl.shared.teams.inbox import unread_batch
from teamctl.shared.teams.team_fallbacks import team_caller
from teamctl.shared.teams.team_store import TeamStore
from teamctl.shared.teams.teammates import IdleReason, Teammate
from teamctl.shared.teams.transcripts import mark_turn
from teamctl.shared.text import shorten
from teamctl.shared.tracing import (
    NO_SPAN,
    NO_TRACING,
    WORKER_SERVICE,
    Span,
    Tracing,
    tracing_from_settings,
)
from teamctl.worker.jobs import job_connection, worker_name
from teamctl.worker.keepalive import KeepAlive
from teamctl.worker.process_privacy import keep_environment_private
from teamctl.worker.teams.teammate_tools import TeammateTools
from teamctl.worker.teams.teammate_workspace import (
    add_teammate_mcp_tools,
    add_teammate_python_tools,
    add_teammate_workspace,
    check_teammate_host,
    mcp_hub,
    open_mirror,
    tools_meta,
)

log = logging.getLogger(__name__)


class TurnRevoked(Exception):  # noqa: N818  (a signal, not a failure to report)
    """The turn lease no longer holds this job's token: stop without writing."""


def run_turn(team: str, name: str) -> str:
    """The RQ job: run the teammate's turn (and the turns mail arriving meanwhile asks for)."""
    keep_environment_private()  # a bare `rq worker` did not: tools run in this job
    settings = load_settings()
    tracing = tracing_from_settings(settings, WORKER_SERVICE)
    try:
        return execute_turn(
            job_connection(settings), team, name, settings=settings, tracing=tracing
        )
    finally:  # a forked job ends in os._exit: its spans go now or never
        tracing.close()


def execute_turn(
    conn: redis.Redis,
    team: str,
    name: str,
    *,
    settings: Settings | None = None,
    tracing: Tracing = NO_TRACING,
) -> str:
    """The job body without RQ: take the lease, run steps until the turn ends, then reconcile
    the team if none of its workers did for a lease TTL (a dead worker's turn is rerun even
    while no person runs a `team` verb)."""
    store = TeamStore(conn, team)
    settings = settings or load_settings()  # its state dir holds workspaces not spawner-chosen
    verdict, token = store.turns.begin_turn(name, worker_name())
    if verdict != "ok":
        return f"skipped: {verdict}"
    options = store.options
    client = LitellmClient(
        provider_keys=settings.provider_keys,
        timeout_s=options.model_timeout_s,
        max_retries=options.model_max_retries,
        limits=worker_limits(conn, options.limits, settings),
    )
    with TurnLease(store, name, token, options.heartbeat_ttl_s) as lease:
        outcome = Turn(
            store,
            store.get(name),
            token,
            client,
            lease,
            state_dir=settings.state_dir,
            tracing=tracing,
        ).run()
    store.scheduler.reconcile_at_most_every_ttl()
    return outcome


class TurnLease(KeepAlive):
    """Refreshes the turn lease each ttl/3 from a daemon thread; `revoked` once it is refused."""

    def __init__(self, store: TeamStore, name: str, token: str, ttl_s: float) -> None:
        super().__init__(self._refresh, ttl_s, f"turn-lease-{name}")
        self.store = store
        self.name = name
        self.token = token
        self.revoked = threading.Event()

    def heartbeat(self) -> bool:
        """Refresh the lease now (a Python tool's long work); False once it was lost."""
        if self.revoked.is_set():
            return False
        if not self.store.turns.refresh_turn(self.name, self.token):
            self.revoked.set()
        return not self.revoked.is_set()

    def check(self) -> None:
        """Raise TurnRevoked once the lease was lost."""
        if self.revoked.is_set():
            raise TurnRevoked(f"the turn of {self.name} was revoked")

    def _refresh(self) -> bool:
        """One refresh from the keep-alive thread; False (revoked) once it is refused."""
        if not self.store.turns.refresh_turn(self.name, self.token):
            self.revoked.set()
            return False
        return True


@dataclass
class Turn:
    """The steps of one teammate's turn, from its memory, until it ends or is revoked. It is
    the agent loop's policy for a teammate: before each call it checks the job's time, the
    team's budget and the lease, and injects the unread inbox; each step is checkpointed
    before its tools run and again after them."""

    store: TeamStore
    teammate: Teammate
    token: str
    client: LitellmClient
    lease: TurnLease
    state_dir: Path
    """This worker's state dir: the workspace of a teammate spawned without one."""
    tracing: Tracing = NO_TRACING
    """Each turn is a trace of its own, linked to the messages it woke to."""
    span: Span = field(default=NO_SPAN, init=False)
    """The current turn's `invoke_agent` span."""
    tool_names: list[str] = field(default_factory=list)
    started_s: float = field(default_factory=time.monotonic)
    """When the job began: RQ kills it at turn_timeout_s + 60 s, so turns must end before."""
    dropped: int = field(default=0, init=False)
    """Messages the memory caps dropped since the conversation was read from memory."""
    spent: str | None = field(default=None, init=False)
    """Why the team's budget is spent, once a charge or a check found it so (it stays spent:
    a team's limits never change)."""
    tools: TeammateTools = field(init=False)
    toolbox: Toolbox = field(init=False)
    offset: str = field(default="", init=False)
    """The inbox offset past the mail injected into the current step."""

    def run(self) -> str:
        """Steps until the teammate goes idle; 'revoked' when the lease was lost. Its MCP
        servers run for the whole job and stop with it."""
        self.tools = tools = TeammateTools(self.store, self.teammate.name, self.token)
        self.toolbox = toolbox = tools.toolbox(self.store.options.tool_result_max_chars)
        with contextlib.ExitStack() as stack:
            meta = tools_meta(self.store, self.teammate)
            mirror = open_mirror(self.store, meta, self.teammate, self.token) if meta else None
            root = mirror.root if mirror else None
            if mirror:  # removed after the MCP servers (later callbacks run first) stop
                stack.callback(mirror.close)
            try:
                if meta:
                    check_teammate_host(self.store, meta)
                add_teammate_workspace(toolbox, self.store, self.teammate, self.state_dir, root)
                add_teammate_python_tools(
                    toolbox, self.store, self.teammate, self.state_dir, self.lease.heartbeat, root
                )
                if self.teammate.mcp and meta:
                    hub = stack.enter_context(
                        mcp_hub(self.store, meta, self.teammate, self.state_dir, mirror)
                    )
                    add_teammate_mcp_tools(toolbox, self.store, meta, self.teammate, hub)
            except ConfigError as exc:  # a tool this worker cannot give: it idles saying so
                error = shorten(str(exc), 500)
                self._mark("begin", worker_name())  # a turn that ends before its first call
                return self._end(f"error: {shorten(error, 120)}", "", error=error)
            if mirror:  # every tool but the team's own may change files: each call syncs
                mirror.guard(
                    toolbox, [name for name in toolbox.names if name not in TEAMMATE_TOOLS]
                )
            self.tool_names = toolbox.names
            return self._turns()

    def _turns(self) -> str:
        """Run turns while mail keeps arriving, within the job's time."""
        while True:
            with self._start_span() as span:
                try:
                    if not self._mark("begin", worker_name()):
                        raise TurnRevoked(f"the turn of {self.teammate.name} was revoked")
                    reason, answer = self._steps()
                    verdict = self._end(reason, answer)
                except TurnRevoked:
                    span.event("teamctl.turn.revoked")
                    return "revoked"
                except BudgetSpent:  # the next call's worst case was not covered: not made
                    span.event("teamctl.budget.exceeded")
                    verdict = self._end(IdleReason.BUDGET, "")
                except Exception as exc:  # the model or a bug: the teammate idles with the error
                    log.exception("turn of %s failed", self.teammate.name)
                    error = shorten(str(exc) or type(exc).__name__, 500)
                    verdict = self._end(f"error: {shorten(error, 120)}", "", error=error)
                    span.fail(type(exc).__name__)
                span.set({"teamctl.outcome": verdict})
            if verdict != "continue":
                return verdict
            # Another turn might outlast the job's timeout, or share this process with a Python
            # tool's abandoned call: a fresh job runs it (this work-horse exits, the call with it).
            if self._elapsed_s() > self.store.options.turn_timeout_s / 2 or abandoned_tool_calls():
                return (
                    "handed over"
                    if self.store.turns.hand_over(self.teammate.name, self.token)
                    else "revoked"
                )
            self.tools.idle_requested.clear()

    def _start_span(self) -> Span:
        """A new trace for the turn about to run, linked to the spans that sent its unread mail;
        the turn's model and tool calls go under it."""
        links: list[str | None] = []
        if self.tracing.on:
            _, unread = self.store.messages.peek(
                self.teammate.name, limit=self.store.options.inbox_batch_messages
            )
            links = [message.traceparent for message in unread]
            links += self._task_traceparents(
                [m.task_id for m in unread if m.type == SystemType.TASK_ASSIGNED and m.task_id]
            )
        name = self.teammate.name
        self.span = self.tracing.start(
            f"invoke_agent {name}",
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                "teamctl.team": self.store.team,
                "teamctl.member": name,
                "teamctl.worker": worker_name(),
                "host.name": socket.gethostname(),
                "process.pid": os.getpid(),
            },
        )
        self.toolbox.trace = self.tools.trace = self.span
        return self.span

    def _task_traceparents(self, task_ids: list[str]) -> list[str | None]:
        """The spans that added the tasks given to this teammate (one round trip)."""
        if not task_ids:
            return []
        pipe = self.store.conn.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self.store.keys.task(task_id), "traceparent")
        return [value if isinstance(value, str) else None for value in pipe.execute()]

    def _elapsed_s(self) -> float:
        return time.monotonic() - self.started_s

    def _end(self, reason: str, answer: str, *, error: str = "") -> str:
        """End the turn through turn_end.lua, with the idle notice the lead gets. A spent budget
        ends it as a failed turn does, even with unread mail: going on would only end again,
        and a task claimed for it would wait on a teammate that makes no model call."""
        if reason == IdleReason.BUDGET:
            error = error or self.spent or "budget exceeded"
        notice = f"{self.teammate.name} is idle ({reason})"
        if answer.strip():
            notice += ": " + shorten(answer, self.store.options.last_answer_chars)
        self._mark("end", str(reason))  # refused for a revoked turn, as end_turn is next
        return self.store.turns.end_turn(
            self.teammate.name,
            self.token,
            reason,
            notice,
            force=bool(error),
            error=error,
            budget=reason == IdleReason.BUDGET,
        )

    def _mark(self, kind: str, detail: str) -> bool:
        """Record that the turn begins or ends (for its transcript), fenced by its token; False
        once the token lost the lease (nothing written)."""
        return mark_turn(self.store, self.teammate.name, self.token, kind, detail) is not None

    def _over_budget(self) -> bool:
        """Whether the team's budget is spent: checked before every model call."""
        if self.spent is None:
            self.spent = self.store.budget_exceeded()
        return self.spent is not None

    def _ended(self, reason: IdleReason) -> IdleReason:
        """How a turn that ends now ends: `budget` once its last call spent the budget."""
        return IdleReason.BUDGET if self.spent else reason

    def _steps(self) -> tuple[str, str]:
        """Model steps, each checkpointed; returns the idle reason and the last answer."""
        memory = self.store.turns.memory(self.teammate.name)
        self.dropped = 0
        # One read for its plan state and shutdown request.
        teammate = self.store.get(self.teammate.name)
        system = {"role": "system", "content": self._system_prompt(teammate.plan_state)}
        messages = [system, *memory]
        if pending_calls(memory):
            # Killed between a reply and its tool results: run them (recorded team writes
            # replay, so none repeats), then carry on as the killed turn would have.
            messages.extend(self._run_calls(pending_calls(memory)))
            if self.tools.idle_requested.is_set():
                return IdleReason.DONE, str(memory[-1].get("content") or "")
            # Those calls may have approved a shutdown.
            teammate = self.store.get(self.teammate.name)
        elif _ended_by_idle(memory):
            # Killed after committing a step that called idle: the turn had ended.
            return IdleReason.DONE, ""
        answer = _last_answer(memory)
        if teammate.shutdown_request:
            # A rerun after it approved its shutdown: end now, shut down (turn_end.lua).
            return IdleReason.DONE, answer or ""
        if (
            answer is not None
            and not self.store.messages.peek(
                self.teammate.name, limit=self.store.options.inbox_batch_messages
            )[1]
        ):
            # A rerun of a turn whose final answer was committed: nothing new to answer.
            # (Otherwise the first model step peeks the inbox itself.)
            return IdleReason.DONE, answer
        # Each call waits for its provider's slot (the lease beats meanwhile) and is charged
        # to the team's budget when it settles.
        client = self.client.scoped(
            CallScope(
                budget=self.store.budget,
                stop=self.lease.check,
                waiting=self._show_waiting,
                on_charge=self._charged,
            )
        )
        caller = team_caller(self.store, client, self.teammate.name, self.teammate.fallbacks)
        loop = AgentLoop(
            client=TracingCaller(caller, self.span),
            model=self.teammate.model,
            api_base=self.teammate.api_base,
            toolbox=self.toolbox,
            max_steps=self.store.options.turn_max_steps,
            policy=self,
        )
        try:
            end = loop.run(messages)
        except BudgetSpent as exc:  # the call's reservation: the budget cannot cover it
            self.spent = str(exc) or "budget spent"
            if not self.store.budget_exceeded():  # every teammate and the lead pause too
                self.store.budget.mark_spent(self.spent)
            self.span.event("teamctl.budget.exceeded")
            return IdleReason.BUDGET, ""
        last_text = end.reply.content or "" if end.reply else ""
        if end.answer is not None or end.stop == IdleReason.DONE:
            # An answer, or a step that called idle or whose call spent the budget.
            return self._ended(IdleReason.DONE), last_text
        if end.stop is not None:  # the job's time or the budget, before a call
            return end.stop, ""
        return self._ended(IdleReason.STEP_LIMIT), ""

    # --- the agent loop's policy -------------------------------------------------------------

    def prepare(self, step: int, messages: list[Message]) -> list[Message] | Stop:
        if self._elapsed_s() > self.store.options.turn_timeout_s:
            return Stop(IdleReason.TIME_LIMIT)
        if self._over_budget():
            self.span.event("teamctl.budget.exceeded")
            return Stop(IdleReason.BUDGET)
        # What the memory caps dropped leaves the conversation sent too.
        del messages[1 : 1 + self.dropped]
        self.dropped = 0
        self.lease.check()
        # A bounded batch (inbox_batch_messages, tool_result_max_chars): the rest stays unread
        # for the next step, or keeps the turn going once this one ends.
        batch = unread_batch(self.store, self.teammate.name)
        self.offset = batch.offset
        return [{"role": "user", "content": batch.block()}] if batch.lines else []

    def on_reply(self, reply: ModelReply, sent: list[Message]) -> None:
        # Charged already (the settle of its slot): the call was paid for, whatever becomes of
        # the turn.
        self.lease.check()
        # The inbox block, the reply and the inbox offset, in one checkpoint before any tool.
        self._commit(self.offset, sent)

    def _show_waiting(self, waiting: Waiting | None) -> None:
        """Say on the teammate's record what its call waits for (fenced by the turn's token),
        or clear it."""
        scripts = self.store.scripts  # run plainly: a wait is no write of a tool call's
        plain = scripts.scripts if isinstance(scripts, GuardedScripts) else scripts
        plain["mate_waiting"](
            keys=[self.store.keys.teammate(self.teammate.name)],
            args=[
                self.token,
                waiting.model if waiting else "",
                waiting.since_ms if waiting else 0,
                waiting.until_ms if waiting else 0,
            ],
        )

    def _charged(self, charge: Charge) -> None:
        """After each call was charged: whether it spent the budget (the lead told once)."""
        self.spent = self.store.charged(charge).exceeded

    def run_tools(self, reply: ModelReply) -> list[Message]:
        # The calls of the reply that spent the budget still run: they are paid for, and left
        # pending a later turn would run them.
        return self._run_calls(assistant_message(reply)["tool_calls"])

    def end_step(self, reply: ModelReply, sent: list[Message]) -> Stop | None:
        if reply.tool_calls and (self.tools.idle_requested.is_set() or self.spent):
            return Stop(IdleReason.DONE)
        return None

    def _run_calls(self, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Run a reply's tool calls and commit their results; each call's team writes are
        guarded by its position and id, so a rerun of this step replays them."""
        results = []
        for index, call in enumerate(calls):
            self.lease.check()
            guarded = self.store.guarded(self.teammate.name, self.token, f"{index}:{call['id']}")
            with self.tools.writing_through(guarded):
                content = self.toolbox.call(
                    call["function"]["name"], call["function"]["arguments"], call["id"]
                )
            if guarded.scripts.revoked:  # a write was refused: stop before the next tool runs
                raise TurnRevoked(f"the turn of {self.teammate.name} was revoked")
            results.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": content,
                }
            )
        self._commit("", results)
        return results

    def _commit(self, offset: str, step: list[dict[str, Any]]) -> None:
        """Checkpoint `step` (and the inbox offset); TurnRevoked when the token lost the lease."""
        dropped = self.store.turns.commit_step(self.teammate.name, self.token, offset, step)
        if dropped is None:
            raise TurnRevoked(f"the checkpoint of {self.teammate.name} was refused")
        self.dropped += dropped

    def _system_prompt(self, plan_state: str | None) -> str:
        # The spawn prompt is memory's first message; identity is restated every turn.
        return render(
            "teamctl.worker.teams",
            "teammate_system.md",
            name=self.teammate.name,
            team=self.store.team,
            role=self.teammate.role or "teammate",
            plan_mode=_plan_mode_note(plan_state),
            tools=", ".join(self.tool_names),
            workspace=any(tool in WORKSPACE_TOOLS for tool in self.teammate.tools),
        )


def _plan_mode_note(plan_state: str | None) -> str:
    """The system prompt's plan-mode line: whether the teammate still needs an approved plan."""
    if not plan_state:
        return "off"
    if plan_state == "approved":
        return "on, and your plan is approved: carry it out"
    return (
        "on: before changing anything, submit_plan and wait for the lead's "
        "plan_approval_response (a rejection says what to revise)"
    )


def pending_calls(memory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool calls of memory's last message when their results were never committed (a turn
    killed between the two checkpoints of a step)."""
    if memory and memory[-1].get("role") == "assistant":
        return list(memory[-1].get("tool_calls") or [])
    return []


def _ended_by_idle(memory: list[dict[str, Any]]) -> bool:
    """Whether memory ends with the committed results of a reply that called idle."""
    for message in reversed(memory):
        if message.get("role") != "tool":
            calls = message.get("tool_calls") or []
            return message.get("role") == "assistant" and any(
                call["function"]["name"] == "idle" for call in calls
            )
    return False


def _last_answer(memory: list[dict[str, Any]]) -> str | None:
    """The final answer memory ends with (an assistant message without tool calls), if any."""
    if memory and memory[-1].get("role") == "assistant" and not memory[-1].get("tool_calls"):
        return str(memory[-1].get("content") or "")
    return None
