"""One member session on one claimed task: dispatch input, agent loop, fenced outcome."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis
from teamctl.shared.agent.fallbacks import Cooldowns, FallbackCaller, FallbackNote, ModelLedger
from teamctl.shared.agent.llm import LitellmClient as ModelClient
from teamctl.shared.agent.loop import AgentLoop, Stop, tool_message
from teamctl.shared.agent.mcp_tools import McpHub, McpTimeouts, add_mcp_tools
from teamctl.shared.agent.model_caller import Message
from teamctl.shared.agent.prompts import render
from teamctl.shared.agent.python_tools import ToolContext, add_python_tools
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.agent.tool_names import RESERVED_PREFIX
from teamctl.shared.agent.tools import Toolbox
from teamctl.shared.agent.tracing_caller import TracingCaller as TracedModel
from teamctl.shared.agent.workspace import Workspace
from teamctl.shared.agent.workspace_mirror import WorkspaceMirror
from teamctl.shared.agent.workspace_tools import add_workspace_tools
from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.shared.budget import Budget, Charge
from teamctl.shared.bus import SYSTEM, MessageBus
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import BudgetSpent, ModelError, RunFailed
from teamctl.shared.hosts import this_host
from teamctl.shared.keys import RunKeys
from teamctl.shared.provider_limits import CallScope, Waiting
from teamctl.shared.runs.journal import AppendRefused, RecordedStep, StepJournal
from teamctl.shared.runs.mcp_cache import McpToolCache
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.store import RunStore
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.team_file import Member
from teamctl.shared.tracing import NO_SPAN, NO_TRACING, Attributes, Span, Tracing
from teamctl.shared.workspace_caps import check_workspace_host
from teamctl.shared.workspace_files import Fence, WorkspaceFiles
from teamctl.worker.runs.claims import AttemptAbandoned, Claim, ClaimEnd, Claims, HandedOff
from teamctl.worker.runs.heartbeat import Heartbeat
from teamctl.worker.runs.mailbox import Mailbox
from teamctl.worker.runs.member_tools import MemberToolContext, add_member_tools
from teamctl.worker.runs.replaying_caller import ReplayingCaller as ReplayingClient
from teamctl.worker.runs.task_prompt import build_dispatch_input

FAILED_OUTCOMES = {"failed": "TaskFailed", "abandoned": "AttemptAbandoned",
                   "stale": "StaleWrite"}
"""An attempt's outcomes that mark its span failed, and the error type each records."""


@dataclass
class JobContext:
    """Everything a job's sessions share: the run, its stores, and this job's claims."""

    conn: redis.Redis
    spec: RunSpec
    board: TaskBoard
    bus: MessageBus
    store: RunStore
    budget: Budget
    client: ModelClient
    claims: Claims
    beat: Heartbeat
    worker: str
    tracing: Tracing = NO_TRACING
    traceparent: str | None = None
    """The span the attempts' spans go under: the round that dispatched the task, or the run."""


class Attempt:
    """Runs one claim as its member in a fresh session and writes the outcome with its token.
    It is the agent loop's policy for a member: before each call it checks its claim, the run
    and the budget; after each step's tools, whether a tool ended the claim."""

    def __init__(self, job: JobContext, claim: Claim) -> None:
        self.job = job
        self.claim = claim
        self.mailbox: Mailbox | None = None
        """This session's reads of its member's inbox, when it has the team tools."""
        self.transcript: list[Message] | None = None
        """The session's messages once it started (they go with the outcome, an error's too)."""
        self.mcp: McpHub | None = None
        """This session's MCP servers, when its member has some; stopped when it ends."""
        self.toolbox = Toolbox()
        """The member's tools, built when its session starts."""
        self.mirror: WorkspaceMirror | None = None
        """This session's copy of a workspace kept in Redis, when its member has tools."""
        self.member: Member | None = None
        self.journal: StepJournal | None = None
        """The task's step journal, written with this attempt's token."""
        self.replay: ReplayingClient | None = None
        """The model calls, answered from the journal while it has the step."""
        self.span: Span = NO_SPAN
        """This attempt's `invoke_agent` span."""
        self.step_models: list[str | None] = []
        """The model that answered each step's call, kept beside the transcript (a chat
        message sent back to a provider carries no key it does not know)."""

    def run(self) -> str:
        """Run the claim's task in a fresh member session and write its outcome."""
        job, claim = self.job, self.claim
        task = job.board.get(claim.task_id)
        member = job.spec.member(claim.member_id) or (
            job.spec.member_for(task.member_id) if task else None)
        if task is None or member is None:
            return "skipped: task or member vanished"
        job.bus.publish(SYSTEM, member.id, SystemType.TASK_ASSIGNED, task.task_id, task.task)
        self.span = job.tracing.start(f"invoke_agent {member.id}", parent=job.traceparent,
                                      attributes=self._span_attributes(member, task))
        try:
            with self.span:
                outcome = self._run(member, task)
                ended = outcome.partition(":")[0]
                self.span.set({"teamctl.outcome": ended})
                if ended in FAILED_OUTCOMES:  # an outcome, not an exception: say it failed
                    self.span.fail(FAILED_OUTCOMES[ended])
                return outcome
        finally:
            if self.mcp:
                self.mcp.close()
            if self.mirror:  # after the MCP servers, which work in it
                self.mirror.close()

    def _span_attributes(self, member: Member, task: TaskState) -> Attributes:
        """Who runs what, where: ids and names only."""
        job, claim = self.job, self.claim
        return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": member.id,
                "teamctl.run_id": job.spec.run_id, "teamctl.task_id": claim.task_id,
                "teamctl.member": member.id, "teamctl.attempt": task.attempts,
                "teamctl.worker": job.worker, "host.name": socket.gethostname(),
                "process.pid": os.getpid()}

    def _run(self, member: Member, task: TaskState) -> str:
        job, claim = self.job, self.claim
        try:
            loop = self._loop(member, task)
            self.transcript = [
                {"role": "system", "content": render("teamctl.worker.runs", "member_system.md",
                                                     name=member.display_name)},
                {"role": "user", "content": self._dispatch_input(member, task)}]
            end = loop.run(self.transcript)
            if end.answer is None:
                raise ModelError(f"member exceeded {loop.max_steps} steps")
        except HandedOff:
            if self.mailbox:  # this member's session is over: what it read is not owed again
                self.mailbox.acknowledge()
            to = claim.handed_to or member.id
            job.claims.run_again_as(claim, to)
            return f"handed off to {to}"
        except BudgetSpent as exc:  # the pre-check's, or the model call's reservation's
            return self._pause_for_budget(str(exc) or "budget spent")
        except (AttemptAbandoned, AppendRefused) as exc:
            # A refused journal append is a stale write: the task was reclaimed meanwhile.
            self.span.event("teamctl.write.refused" if isinstance(exc, AppendRefused)
                            else "teamctl.attempt.abandoned")
            return f"abandoned: {exc}"
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Past redis_outage_s: the claim expires and the task is reclaimed; fencing refuses
            # anything this attempt might still try to write.
            return f"abandoned: Redis unreachable ({exc})"
        except Exception as exc:  # any member failure becomes the task's error
            return self._fail(member, str(exc) or type(exc).__name__)
        return self._complete(member, end.answer)

    def _loop(self, member: Member, task: TaskState) -> AgentLoop:
        options = self.job.spec.options
        self.toolbox = self._toolbox(member)
        # Traced inside the replay: a step answered from the journal makes no model call (so
        # it waits for no slot and is not charged again).
        client = self.job.client.scoped(CallScope(
            budget=self.job.budget, task_key=self.job.board.keys.task(self.claim.task_id),
            stop=self._stop_waiting, waiting=self._show_waiting, on_charge=self._charged))
        self.replay = ReplayingClient(TracedModel(self._fallback_caller(member, client),
                                                  self.span),
                                      self._recorded_steps(member, task))
        return AgentLoop(client=self.replay, model=self.job.spec.models.for_member(member),
                         api_base=self.job.spec.models.api_base, toolbox=self.toolbox,
                         max_steps=options.member_max_steps, policy=self)

    def _fallback_caller(self, member: Member, client: ModelClient) -> FallbackCaller:
        """The member's model, then its fallbacks; each answer's usage under its model."""
        job, options = self.job, self.job.spec.options
        keys = RunKeys(job.spec.run_id)
        return FallbackCaller(
            client, job.spec.models.fallbacks_for_member(member), options.fallback_after_s,
            Cooldowns(job.conn, options.fallback_cooldown_s),
            ModelLedger(job.conn, keys, keys.task(self.claim.task_id)),
            on_fallback=self._fell_back)

    def _fell_back(self, note: FallbackNote) -> None:
        """A fallback answered: the run's lead (`teamctl events`) and the trace are told."""
        self.span.event("teamctl.model.fallback", {
            "teamctl.model.primary": note.primary, "teamctl.model.answered": note.answered})
        self.job.bus.tell_lead(SystemType.MODEL_FALLBACK, self.claim.task_id,
                             note.text())

    def _recorded_steps(self, member: Member, task: TaskState) -> list[RecordedStep]:
        """What the task's journal holds of this member's session, when the attempt before
        this one died (reclaim.lua took its expired claim back: never a release, whatever
        its reason says); said on the task when there is some."""
        job, claim = self.job, self.claim
        keys = job.board.keys
        assert isinstance(keys, RunKeys)  # a run's job: its board is the run's
        self.member = member
        self.journal = StepJournal(job.conn, keys, claim.task_id, str(claim.token),
                                   job.spec.options.journal_max_bytes, job.board.scripts)
        if job.spec.options.journal_max_bytes <= 0:
            return []
        recorded = self.journal.steps_for(member.id, crashed=task.reclaimed)
        if recorded:
            self.journal.note_replayed(len(recorded))
            self.span.event("teamctl.journal.replayed", {"teamctl.steps": len(recorded)})
        return recorded

    def _toolbox(self, member: Member) -> Toolbox:
        """Workspace tools first, then the team tools (AI4J's order), as the run allows, then
        the member's Python tools (one that will not import here fails the attempt)."""
        job = self.job
        toolbox = Toolbox(trace=self.span,
                          max_result_chars=job.spec.options.tool_result_max_chars)
        add_workspace_tools(toolbox, Workspace(self._workspace_root(member)), member.tools)
        if job.spec.options.enable_member_team_tools:
            self.mailbox = Mailbox(job.bus, member.id, self.claim, trace=self.span)
            add_member_tools(toolbox, MemberToolContext(
                board=job.board, bus=job.bus, member_ids=[m.id for m in job.spec.members],
                member_id=member.id, claim=self.claim, claims=job.claims, worker=job.worker,
                heartbeat_ttl_s=job.spec.options.heartbeat_ttl_s, mailbox=self.mailbox,
                max_task_releases=job.spec.options.max_task_releases,
                result_max_chars=job.spec.options.tool_result_max_chars, trace=self.span))
        add_python_tools(toolbox, member.tools, self._tool_context(member),
                         job.spec.options.tool_result_max_chars,
                         timeout_s=job.spec.options.tool_wait_s)
        if member.mcp_servers:
            self._add_mcp_tools(toolbox, member)
        if self.mirror:  # every tool but the team's may change files: each call syncs them
            self.mirror.guard(toolbox, [name for name in toolbox.names
                                        if not name.startswith(RESERVED_PREFIX)])
        return toolbox

    def _workspace_root(self, member: Member) -> Path:
        """Where the member's tools work: the run's directory (WorkspaceElsewhere when it is on
        another host), or for a workspace kept in Redis a private copy fetched now (only for a
        member with tools: nobody else reads files)."""
        spec, claim = self.job.spec, self.claim
        if not (member.tools or member.mcp_servers):
            return Path(spec.workspace_dir)
        if spec.workspace_store == "local":
            check_workspace_host(f"run {spec.run_id}", spec.workspace_host, this_host())
            return Path(spec.workspace_dir)
        if self.mirror is None:
            keys = RunKeys(spec.run_id)
            self.mirror = WorkspaceMirror.open(WorkspaceFiles(
                self.job.conn, keys, spec.options.file_caps,
                Fence("task", keys.task(claim.task_id), str(claim.token))))
        return self.mirror.root

    def _add_mcp_tools(self, toolbox: Toolbox, member: Member) -> None:
        """Start the member's MCP servers in the run's workspace and offer their tools; the run
        caches each server's list for dispatch inputs. One that will not start fails the task."""
        options = self.job.spec.options
        self.mcp = McpHub(self._workspace_root(member), McpTimeouts(
            options.mcp_start_timeout_s, options.mcp_list_timeout_s, options.mcp_call_timeout_s),
            call_key_prefix=f"{self.job.spec.run_id}:{self.claim.task_id}")
        cache = McpToolCache(self.job.conn, RunKeys(self.job.spec.run_id),
                             self.job.board.scripts)
        for server in member.mcp_servers:
            tools = self.mcp.start(server)
            cache.remember(server.name, [tool.as_json() for tool in tools])
            add_mcp_tools(toolbox, self.mcp, server, tools, member.mcp,
                          options.tool_result_max_chars)

    def _tool_context(self, member: Member) -> ToolContext:
        """What this attempt's Python tools may know; their heartbeat refreshes its claim."""
        job, claim = self.job, self.claim
        return ToolContext(member_id=member.id, workspace=self._workspace_root(member),
                           heartbeat=lambda: job.beat.refresh(claim), run_id=job.spec.run_id,
                           task_id=claim.task_id, team_id=job.spec.team_id)

    # --- the agent loop's policy -------------------------------------------------------------

    def prepare(self, step: int, messages: list[Message]) -> list[Message] | Stop:
        self._check_continue()
        return []

    def on_reply(self, reply: ModelReply, sent: list[Message]) -> None:
        assert self.replay and self.journal and self.member  # set with the loop
        self.step_models.append(reply.model)
        if self.replay.replaying:  # paid and charged by the attempt that recorded it
            return
        # Charged already, by the settle of the call's slot (ModelClient's gate).
        self.journal.record_reply(self.member.id, self.replay.step, reply)

    def _charged(self, charge: Charge) -> None:
        """After each call was charged: the call that crossed a limit tells the lead."""
        if charge.crossed and charge.exceeded:
            # Once per run: the lead (and `teamctl messages`) learn why members stop.
            self.job.bus.tell_lead(SystemType.RUN_BUDGET_EXCEEDED,
                                 self.claim.task_id, charge.exceeded)

    def _stop_waiting(self) -> None:
        """While a call waits for its provider's slot: stop once the claim is lost or the run
        cancelled (its timeout cancels it too); the beat keeps the claim meanwhile."""
        self._check_claim()
        if not self.job.beat.refresh(self.claim):
            raise AttemptAbandoned("claim lost: the task was reclaimed")
        if self.job.store.cancelled():
            raise RunFailed("run cancelled")

    def _show_waiting(self, waiting: Waiting | None) -> None:
        """Say on the task what its call waits for (fenced by the claim's token), or clear it."""
        claim = self.claim
        self.job.board.scripts["task_waiting"](
            keys=[self.job.board.keys.task(claim.task_id)],
            args=[str(claim.token), waiting.model if waiting else "",
                  waiting.since_ms if waiting else 0, waiting.until_ms if waiting else 0])

    def run_tools(self, reply: ModelReply) -> list[Message]:
        # The claim may have been lost during a long call: a stale attempt runs no tools. The
        # tools of a reply that spent the budget still run: it is paid for, and journaled.
        self._check_continue(budget=False)
        assert self.replay and self.journal and self.member  # set with the loop
        results = []
        for call in reply.tool_calls:
            content = self.replay.recorded_result(call.id)
            if content is None:  # not finished before: run it now, and record its result
                content = self.toolbox.call(call.name, call.arguments, call.id)
                self.journal.record_result(self.member.id, self.replay.step, call.id, content)
            results.append(tool_message(call, content))
        return results

    def end_step(self, reply: ModelReply, sent: list[Message]) -> Stop | None:
        # After the tools, so a handoff or release made on the last step still ends the
        # session as that tool asked, instead of as a step-limit failure.
        if reply.tool_calls:
            self._check_claim()
        return None

    def _check_claim(self) -> None:
        """Stop the session if a tool ended its claim: handed off, released, or found lost."""
        claim = self.claim
        if claim.handed_to is not None:
            raise HandedOff(claim.handed_to)
        if not claim.live:
            raise AttemptAbandoned(f"claim {claim.end.value if claim.end else 'ended'}")

    def _check_continue(self, *, budget: bool = True) -> None:
        """Before each model call: still our claim, run not cancelled, budget left (else
        BudgetSpent: the claim goes back for after a top-up)."""
        self._check_claim()
        claim = self.claim
        # A synchronous refresh, not just the thread's flag: a reclaimed task must not get one
        # more model call however the heartbeat thread is scheduled.
        if not self.job.beat.refresh(claim):
            self.span.event("teamctl.claim.lost")
            raise AttemptAbandoned("claim lost: the task was reclaimed")
        if self.job.store.cancelled():
            self.span.event("teamctl.run.cancelled")
            raise RunFailed("run cancelled")
        reason = self.job.budget.exceeded() if budget else None
        if reason:
            raise BudgetSpent(reason)
        # The call about to be made carries every tool result so far, messages read included.
        if self.mailbox and not self.mailbox.acknowledge():
            raise AttemptAbandoned("claim lost: the task was reclaimed")

    def _dispatch_input(self, member: Member, task: TaskState) -> str:
        job = self.job
        options = job.spec.options
        dependencies = job.board.get_many(task.depends_on)
        history = job.bus.history_for(member.id, options.message_history_limit)
        for message in history:
            self.span.link(message.traceparent, {"teamctl.message_id": message.id,
                                                 "teamctl.from": message.from_})
        mcp_tools = []
        if member.mcp_servers:
            cache = McpToolCache(job.conn, RunKeys(job.spec.run_id), job.board.scripts)
            mcp_tools = cache.member_tools(member.mcp, [s.name for s in member.mcp_servers])
        return build_dispatch_input(member=member, task=task, objective=job.spec.objective,
                                    options=options, dependencies=dependencies, history=history,
                                    mcp_tools=mcp_tools)

    def _pause_for_budget(self, reason: str) -> str:
        """The budget cannot cover the next call: give the claim back for after a top-up (not
        an attempt, not a release), keeping the journal so the steps paid for are replayed."""
        job, claim = self.job, self.claim
        self.span.event("teamctl.budget.exceeded")
        job.budget.mark_spent(reason)  # the coordinator pauses on it, even if totals do not say
        if not job.claims.end(claim, ClaimEnd.RELEASED):
            return "abandoned: the claim had already ended"
        if self.mirror:  # files a background command wrote, while the claim still holds
            self.mirror.push()
        outcome = job.board.release_for_budget(claim.task_id, claim.token, reason)
        if outcome is not WriteOutcome.APPLIED:
            return f"abandoned: {outcome.value}"
        return f"awaiting budget: {reason}"

    def _complete(self, member: Member, output: str) -> str:
        return self._write_outcome(self.job.board.complete, member, output,
                                   TaskStatus.COMPLETED)

    def _fail(self, member: Member, error: str) -> str:
        return self._write_outcome(self.job.board.fail, member, error, TaskStatus.FAILED)

    def _write_outcome(self, write: Callable[..., WriteOutcome], member: Member, text: str,
                       done: TaskStatus) -> str:
        """Write the output or error with the claim's token; the member announces it to lead
        in the same step. A refused write (the claim was reclaimed) changes nothing."""
        job, claim = self.job, self.claim
        if self.mirror:  # what a background command wrote since the last tool call, while
            self.mirror.push()  # the claim still holds (after the outcome it would not)
        job.claims.end(claim, ClaimEnd.FINISHED)
        if self.mailbox:  # fenced by the token: a stale attempt settles nothing
            self.mailbox.settle()
        # Fenced too: a stale attempt's transcript is refused.
        keys = job.board.keys
        assert isinstance(keys, RunKeys)  # a run's job: its board is the run's
        Transcripts(job.conn, keys, job.board.scripts).save(
            claim.task_id, claim.token, self._kept_transcript(),
            job.spec.options.transcript_max_chars)
        announcer = member.id if job.bus.enabled else None
        outcome = write(claim.task_id, claim.token, text, self._elapsed_ms(),
                        announce_as=announcer)
        if outcome is not WriteOutcome.APPLIED:
            self.span.event("teamctl.write.refused", {"teamctl.outcome": outcome.value})
            return "stale: the claim was reclaimed; nothing was written"
        return done.value

    def _kept_transcript(self) -> list[Message] | None:
        """The session's messages as stored with the outcome: a replayed session ends with a
        note saying how many of its steps came from the journal (not sent to the model)."""
        replayed = len(self.replay.recorded) if self.replay else 0
        if self.transcript is None:
            return None
        kept = with_models(self.transcript, self.step_models)
        if not replayed:
            return kept
        return [*kept, {"role": "system", "content": (
            f"[teamctl] this attempt replayed its first {replayed} step(s) from the task's "
            "journal (recorded by the attempt before it, which died): those model calls and "
            "tool calls were not made again")}]

    def _elapsed_ms(self) -> int:
        return int((time.monotonic() - self.claim.started_s) * 1000)


def with_models(transcript: list[Message], models: list[str | None]) -> list[Message]:
    """Copies of the transcript's assistant messages with the `model` that answered each (in
    order), for the stored transcript only: the session's own messages stay as sent."""
    answered = iter(models)
    kept = []
    for message in transcript:
        model = next(answered, None) if message.get("role") == "assistant" else None
        kept.append({**message, "model": model} if model else message)
    return kept
