"""One member session on one claimed task: dispatch input, agent loop, fenced outcome."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Mapping

import redis
from teamctl.shared.agent.fallbacks import Cooldowns, FallbackCaller, FallbackNote, ModelLedger
from teamctl.shared.agent.llm import LitellmClient
from teamctl.shared.agent.loop import AgentLoop, Stop, tool_message
from teamctl.shared.agent.model_caller import Message
from teamctl.shared.agent.prompts import render
from teamctl.shared.agent.python_tools import idempotency_key
from teamctl.shared.agent.replies import ModelReply, ToolCall
from teamctl.shared.agent.tools import SPAN_ID_CHARS, TOOL_ERROR_PREFIX, Toolbox, bounded_result
from teamctl.shared.agent.tracing_caller import TracingCaller
from teamctl.shared.board import WriteOutcome
from teamctl.shared.budget import Charge
from teamctl.shared.bus import SYSTEM
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import BudgetSpent, ModelError, ReplayDiverged, RunFailed
from teamctl.shared.providers.limits import CallScope, Waiting
from teamctl.shared.runs.journal import (
    AppendRefused,
    InDoubt,
    RecordedStep,
    StepJournal,
    in_doubt_text,
)
from teamctl.shared.runs.lineage import TaskReuse
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.mcp_cache import McpToolCache
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import TaskState
from teamctl.shared.team_file import Member
from teamctl.shared.text import echoed, quoted
from teamctl.shared.tracing import NO_SPAN, Attributes, Span
from teamctl.worker.runs.attempt_outcome import AttemptEnd, AttemptOutcome
from teamctl.worker.runs.claims import AttemptAbandoned, Claim, ClaimEnd, HandedOff
from teamctl.worker.runs.job_context import JobContext
from teamctl.worker.runs.member_toolbox import MemberToolbox
from teamctl.worker.runs.replaying_caller import ReplayingCaller
from teamctl.worker.runs.task_prompt import build_dispatch_input


class Attempt:
    """Runs one claim as its member in a fresh session and writes the outcome with its token.
    It is the agent loop's policy for a member: before each call it checks its claim, the run
    and the budget; after each step's tools, whether a tool ended the claim."""

    def __init__(self, job: JobContext, claim: Claim) -> None:
        self.job = job
        self.claim = claim
        self.transcript: list[Message] | None = None
        """The session's messages once it started (they go with the outcome, an error's too)."""
        self.tools = MemberToolbox(job, claim)
        """What the member's tools hold open (inbox reads, workspace copy, MCP servers); closed
        when the session ends."""
        self.toolbox = Toolbox()
        """The member's tools, built when its session starts."""
        self.member: Member | None = None
        self.journal: StepJournal | None = None
        """The task's step journal, written with this attempt's token."""
        self.replay: ReplayingCaller | None = None
        """The model calls, answered from the journal while it has the step."""
        self.span: Span = NO_SPAN
        """This attempt's `invoke_agent` span."""
        self.step_models: list[str | None] = []
        """The model that answered each step's call, kept beside the transcript (a chat
        message sent back to a provider carries no key it does not know)."""
        self.reuse: TaskReuse | None = None
        """What the task takes from the run it was replayed or forked from (None: nothing)."""
        self.in_doubt: dict[str, InDoubt] = {}
        """Tool calls a crash left in doubt, by id, and what was done with each: kept beside
        the transcript too, and marked in the stored one."""

    def run(self) -> AttemptOutcome:
        """Run the claim's task in a fresh member session and write its outcome."""
        job, claim = self.job, self.claim
        run = job.run
        task = run.board.get(claim.task_id)
        member = run.spec.member(claim.member_id) or (
            run.spec.member_for(task.member_id) if task else None
        )
        if task is None or member is None:
            return AttemptOutcome(AttemptEnd.SKIPPED, "task or member vanished")
        run.bus.publish(SYSTEM, member.id, SystemType.TASK_ASSIGNED, task.task_id, task.task)
        self.span = job.tracing.start(
            f"invoke_agent {member.id}",
            parent=job.traceparent,
            attributes=self._span_attributes(member, task),
        )
        try:
            with self.span:
                outcome = self._run(member, task)
                self.span.set({"teamctl.outcome": outcome.span_outcome})
                if outcome.span_error:  # an outcome, not an exception: say it failed
                    self.span.fail(outcome.span_error)
                return outcome
        finally:
            self.tools.close()

    def _span_attributes(self, member: Member, task: TaskState) -> Attributes:
        """Who runs what, where: ids and names only."""
        job, claim = self.job, self.claim
        return {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": member.id,
            "teamctl.run_id": job.run.run_id,
            "teamctl.task_id": claim.task_id,
            "teamctl.member": member.id,
            "teamctl.attempt": task.attempts,
            "teamctl.worker": job.worker,
            "host.name": socket.gethostname(),
            "process.pid": os.getpid(),
        }

    def _run(self, member: Member, task: TaskState) -> AttemptOutcome:
        job, claim = self.job, self.claim
        lineage = job.run.spec.lineage
        if lineage is not None:
            self.reuse = LineageRecords(job.run.conn, job.run.keys).reuse_for(claim.task_id)
            if self.reuse is None and lineage.kind == "replay":  # a replay never goes live
                self.reuse = TaskReuse(strict=True, recorded_end="the replay has no record of it")
            if self.reuse is not None and self.reuse.output is not None:
                return self._keep_output(member, self.reuse)
        try:
            loop = self._loop(member, task)
            self.transcript = [
                {
                    "role": "system",
                    "content": render(
                        "teamctl.worker.runs", "member_system.md", name=member.display_name
                    ),
                },
                {"role": "user", "content": self._dispatch_input(member, task)},
            ]
            end = loop.run(self.transcript)
            if end.answer is None:
                raise ModelError(f"member exceeded {loop.max_steps} steps")
        except HandedOff:
            # This member's session is over: what it read is not owed again.
            if self.tools.mailbox:
                self.tools.mailbox.acknowledge()
            to = claim.handed_to or member.id
            job.claims.run_again_as(claim, to)
            return AttemptOutcome(AttemptEnd.HANDED_OFF, to)
        except BudgetSpent as exc:  # the pre-check's, or the model call's reservation's
            return self._pause_for_budget(str(exc) or "budget spent")
        except ReplayDiverged as exc:  # the whole replay stops here, saying where and why
            job.run.store.request_stop(str(exc))
            return self._fail(member, str(exc))
        except (AttemptAbandoned, AppendRefused) as exc:
            # A refused journal append is a stale write: the task was reclaimed meanwhile.
            self.span.event(
                "teamctl.write.refused"
                if isinstance(exc, AppendRefused)
                else "teamctl.attempt.abandoned"
            )
            return AttemptOutcome(AttemptEnd.ABANDONED, str(exc))
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Past redis_outage_s: the claim expires and the task is reclaimed; fencing refuses
            # anything this attempt might still try to write.
            return AttemptOutcome(AttemptEnd.ABANDONED, f"Redis unreachable ({exc})")
        except Exception as exc:  # any member failure becomes the task's error
            return self._fail(member, str(exc) or type(exc).__name__)
        return self._complete(member, end.answer)

    def _loop(self, member: Member, task: TaskState) -> AgentLoop:
        run = self.job.run
        self.toolbox = self.tools.build(member, self.span)
        # Traced inside the replay: a step answered from the journal makes no model call (so
        # it waits for no slot and is not charged again).
        client = self.job.client.scoped(
            CallScope(
                budget=run.budget,
                task_key=run.keys.task(self.claim.task_id),
                stop=self._stop_waiting,
                waiting=self._show_waiting,
                on_charge=self._charged,
            )
        )
        self.replay = ReplayingCaller(
            TracingCaller(self._fallback_caller(member, client), self.span),
            self._recorded_steps(member, task),
            task_id=self.claim.task_id,
            reuse=self.reuse,
        )
        return AgentLoop(
            client=self.replay,
            model=run.spec.models.for_member(member),
            api_base=run.spec.models.api_base,
            toolbox=self.toolbox,
            max_steps=run.spec.options.member_max_steps,
            policy=self,
        )

    def _fallback_caller(self, member: Member, client: LitellmClient) -> FallbackCaller:
        """The member's model, then its fallbacks; each answer's usage under its model."""
        run = self.job.run
        options = run.spec.options
        return FallbackCaller(
            client,
            run.spec.models.fallbacks_for_member(member),
            options.fallback_after_s,
            Cooldowns(run.conn, options.fallback_cooldown_s),
            ModelLedger(run.conn, run.keys, run.keys.task(self.claim.task_id)),
            on_fallback=self._fell_back,
        )

    def _fell_back(self, note: FallbackNote) -> None:
        """A fallback answered: the run's lead (`teamctl events`) and the trace are told."""
        self.span.event(
            "teamctl.model.fallback",
            {"teamctl.model.primary": note.primary, "teamctl.model.answered": note.answered},
        )
        self.job.run.bus.tell_lead(SystemType.MODEL_FALLBACK, self.claim.task_id, note.text())

    def _recorded_steps(self, member: Member, task: TaskState) -> list[RecordedStep]:
        """What the task's journal holds of this member's session, when the attempt before
        this one died (reclaim.lua took its expired claim back: never a release, whatever
        its reason says); said on the task when there is some."""
        run, claim = self.job.run, self.claim
        self.member = member
        self.journal = StepJournal(
            run.conn,
            run.keys,
            claim.task_id,
            str(claim.token),
            run.spec.options.journal_max_bytes,
            run.scripts,
        )
        # A replayed or forked task's journal holds its source's steps from the start (copied
        # whatever this run's cap, which bounds only what it records itself).
        seeded = self.reuse is not None and (self.reuse.steps > 0 or self.reuse.strict)
        if run.spec.options.journal_max_bytes <= 0 and not seeded:
            return []
        if seeded and self.reuse and task.attempts > 1 and not task.reclaimed:
            self.journal.keep_first_steps(self.reuse.steps)  # released: from the source's steps
        recorded = self.journal.steps_for(member.id, crashed=task.reclaimed or seeded)
        if recorded:
            self.journal.note_replayed(len(recorded))
            self.span.event("teamctl.journal.replayed", {"teamctl.steps": len(recorded)})
        return recorded

    # --- the agent loop's policy -------------------------------------------------------------

    def prepare(self, step: int, messages: list[Message]) -> list[Message] | Stop:
        self._check_continue()
        return []

    def on_reply(self, reply: ModelReply, sent: list[Message]) -> None:
        assert self.replay and self.journal and self.member  # set with the loop
        self.step_models.append(reply.model)
        if self.replay.replaying:  # paid and charged by the attempt that recorded it
            return
        # Charged already, by the settle of the call's slot (LitellmClient's gate).
        self.journal.record_reply(self.member.id, self.replay.step, reply)

    def _charged(self, charge: Charge) -> None:
        """After each call was charged: the call that crossed a limit tells the lead."""
        if charge.crossed and charge.exceeded:
            # Once per run: the lead (and `teamctl messages`) learn why members stop.
            self.job.run.bus.tell_lead(
                SystemType.RUN_BUDGET_EXCEEDED, self.claim.task_id, charge.exceeded
            )

    def _stop_waiting(self) -> None:
        """While a call waits for its provider's slot: stop once the claim is lost or the run
        cancelled (its timeout cancels it too); the beat keeps the claim meanwhile."""
        self._check_claim()
        if not self.job.beat.refresh(self.claim):
            raise AttemptAbandoned("claim lost: the task was reclaimed")
        if self.job.run.store.cancelled():
            raise RunFailed("run cancelled")

    def _show_waiting(self, waiting: Waiting | None) -> None:
        """Say on the task what its call waits for (fenced by the claim's token), or clear it."""
        run, claim = self.job.run, self.claim
        run.scripts["task_waiting"](
            keys=[run.keys.task(claim.task_id)],
            args=[
                str(claim.token),
                waiting.model if waiting else "",
                waiting.since_ms if waiting else 0,
                waiting.until_ms if waiting else 0,
            ],
        )

    def run_tools(self, reply: ModelReply) -> list[Message]:
        # The claim may have been lost during a long call: a stale attempt runs no tools. The
        # tools of a reply that spent the budget still run: it is paid for, and journaled.
        self._check_continue(budget=False)
        assert self.replay and self.journal and self.member  # set with the loop
        results = []
        for call in reply.tool_calls:
            content = self.replay.recorded_result(call.id)
            if self.replay.from_source:
                content = self._source_result(call, content)
            if content is None:  # not finished before: run it now, and record its result
                content = self._run_tool(call)
            else:
                self._note_recorded_doubt(call.id)
            results.append(tool_message(call, content))
        return results

    def _source_result(self, call: ToolCall, recorded: str | None) -> str:
        """A tool result of a step taken from the source run: never executed again. A replay
        stops where the current code could not have made the call, or the result is missing."""
        assert self.replay is not None
        strict = self.replay.reuse is not None and self.replay.reuse.strict
        if strict and call.name not in self.toolbox.names and not _unknown_then(recorded):
            raise self.replay.diverged(f"the tool {quoted(echoed(call.name))} it called is gone")
        if recorded is not None:
            return recorded
        if strict:
            raise self.replay.diverged(
                f"the recorded run has no result of its {quoted(echoed(call.name))} call"
            )
        self.in_doubt[call.id] = InDoubt.NOT_RERUN
        lineage = self.job.run.spec.lineage
        assert lineage is not None
        key = idempotency_key(lineage.source_run, self.claim.task_id, call.id)
        return in_doubt_text(echoed(call.name), key)

    def _run_tool(self, call: ToolCall) -> str:
        """Run a call that has no recorded result, its start recorded first and its result
        after. One an earlier attempt started (in doubt: it may have acted) runs again only
        when its tool is safe to repeat; else the model is told, and that is its result."""
        assert self.replay and self.journal and self.member  # set with the loop
        step = self.replay.step
        recorded = self.replay.replayed_step()
        doubt = None
        if recorded is not None and recorded.is_in_doubt(call.id):
            doubt = InDoubt.RERUN if self.toolbox.safe_to_repeat(call.name) else InDoubt.NOT_RERUN
            self.in_doubt[call.id] = doubt
            self.span.event(
                "teamctl.tool.in_doubt",
                {"gen_ai.tool.call.id": call.id[:SPAN_ID_CHARS], "teamctl.in_doubt": doubt.value},
            )
        if doubt is InDoubt.NOT_RERUN:
            content = bounded_result(
                in_doubt_text(echoed(call.name), self._idempotency_key(call.id)),
                self.toolbox.max_result_chars,
            )
        else:
            self.journal.record_start(self.member.id, step, call.id, call.name)
            content = self.toolbox.call(call.name, call.arguments, call.id)
        self.journal.record_result(self.member.id, step, call.id, content, doubt)
        return content

    def _note_recorded_doubt(self, call_id: str) -> None:
        """A replayed result an earlier attempt gave an in-doubt call: its transcript says so."""
        recorded = self.replay.replayed_step() if self.replay else None
        if recorded is not None and call_id in recorded.in_doubt:
            self.in_doubt[call_id] = recorded.in_doubt[call_id]

    def _idempotency_key(self, call_id: str) -> str:
        """The key a Python tool's ToolContext (and an MCP call's _meta) gives this call."""
        return idempotency_key(self.job.run.run_id, self.claim.task_id, call_id)

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
        if self.job.run.store.cancelled():
            self.span.event("teamctl.run.cancelled")
            raise RunFailed("run cancelled")
        reason = self.job.run.budget.exceeded() if budget else None
        if reason:
            raise BudgetSpent(reason)
        # The call about to be made carries every tool result so far, messages read included.
        if self.tools.mailbox and not self.tools.mailbox.acknowledge():
            raise AttemptAbandoned("claim lost: the task was reclaimed")

    def _dispatch_input(self, member: Member, task: TaskState) -> str:
        run = self.job.run
        options = run.spec.options
        dependencies = run.board.get_many(task.depends_on)
        history = run.bus.history_for(member.id, options.message_history_limit)
        for message in history:
            self.span.link(
                message.traceparent,
                {"teamctl.message_id": message.id, "teamctl.from": message.from_},
            )
        mcp_tools = []
        if member.mcp_servers:
            cache = McpToolCache(run.conn, run.keys, run.scripts)
            mcp_tools = cache.member_tools(member.mcp, [s.name for s in member.mcp_servers])
        return build_dispatch_input(
            member=member,
            task=task,
            objective=run.spec.objective,
            options=options,
            dependencies=dependencies,
            history=history,
            mcp_tools=mcp_tools,
        )

    def _pause_for_budget(self, reason: str) -> AttemptOutcome:
        """The budget cannot cover the next call: give the claim back for after a top-up (not
        an attempt, not a release), keeping the journal so the steps paid for are replayed."""
        job, claim = self.job, self.claim
        run = job.run
        self.span.event("teamctl.budget.exceeded")
        run.budget.mark_spent(reason)  # the coordinator pauses on it, even if totals do not say
        if not job.claims.end(claim, ClaimEnd.RELEASED):
            return AttemptOutcome(AttemptEnd.ABANDONED, "the claim had already ended")
        if self.tools.mirror:  # files a background command wrote, while the claim still holds
            self.tools.mirror.push()
        outcome = run.board.release_for_budget(claim.task_id, claim.token, reason)
        if outcome is not WriteOutcome.APPLIED:
            return AttemptOutcome(AttemptEnd.ABANDONED, outcome.value)
        return AttemptOutcome(AttemptEnd.AWAITING_BUDGET, reason)

    def _keep_output(self, member: Member, reuse: TaskReuse) -> AttemptOutcome:
        """A fork's task that does not depend on the fork point: its source's output and
        transcript, with no session (its recorded steps count as reused)."""
        run = self.job.run
        assert reuse.output is not None
        # Copied from the source when the run started (coordinator/runs/reuse.py).
        kept = Transcripts(run.conn, run.keys).load_many([self.claim.task_id])
        self.transcript = kept.get(self.claim.task_id)
        journal = StepJournal(
            run.conn, run.keys, self.claim.task_id, str(self.claim.token), 0, run.scripts
        )
        try:
            journal.note_replayed(reuse.steps)
        except AppendRefused as exc:  # reclaimed meanwhile: the next attempt keeps it
            return AttemptOutcome(AttemptEnd.ABANDONED, str(exc))
        return self._complete(member, reuse.output)

    def _complete(self, member: Member, output: str) -> AttemptOutcome:
        return self._write_outcome(
            self.job.run.board.complete, member, output, AttemptEnd.COMPLETED
        )

    def _fail(self, member: Member, error: str) -> AttemptOutcome:
        return self._write_outcome(self.job.run.board.fail, member, error, AttemptEnd.FAILED)

    def _write_outcome(
        self, write: Callable[..., WriteOutcome], member: Member, text: str, done: AttemptEnd
    ) -> AttemptOutcome:
        """Write the output or error with the claim's token; the member announces it to lead
        in the same step. A refused write (the claim was reclaimed) changes nothing."""
        job, claim = self.job, self.claim
        run = job.run
        # What a background command wrote since the last tool call, pushed while the claim
        # still holds (after the outcome it would not).
        if self.tools.mirror:
            self.tools.mirror.push()
        job.claims.end(claim, ClaimEnd.FINISHED)
        if self.tools.mailbox:  # fenced by the token: a stale attempt settles nothing
            self.tools.mailbox.settle()
        # Fenced too: a stale attempt's transcript is refused.
        Transcripts(run.conn, run.keys, run.scripts).save(
            claim.task_id,
            claim.token,
            self._kept_transcript(),
            run.spec.options.transcript_max_chars,
        )
        announcer = member.id if run.bus.enabled else None
        outcome = write(claim.task_id, claim.token, text, self._elapsed_ms(), announce_as=announcer)
        if outcome is not WriteOutcome.APPLIED:
            self.span.event("teamctl.write.refused", {"teamctl.outcome": outcome.value})
            return AttemptOutcome(AttemptEnd.STALE, "the claim was reclaimed; nothing was written")
        return AttemptOutcome(done)

    def _kept_transcript(self) -> list[Message] | None:
        """The session's messages as stored with the outcome: a replayed session ends with a
        note saying how many of its steps came from the journal (not sent to the model)."""
        replayed = len(self.replay.recorded) if self.replay else 0
        if self.transcript is None:
            return None
        kept = with_in_doubt(with_models(self.transcript, self.step_models), self.in_doubt)
        if not replayed:
            return kept
        return [
            *kept,
            {
                "role": "system",
                "content": (
                    f"[teamctl] this attempt replayed its first {replayed} step(s) from the task's "
                    "journal (recorded by the attempt before it, which died): those model calls "
                    "and "
                    "tool calls were not made again"
                ),
            },
        ]

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


def _unknown_then(recorded: str | None) -> bool:
    """Whether the recorded result says the tool did not exist then either."""
    if recorded is None or not recorded.startswith(TOOL_ERROR_PREFIX):
        return False
    with contextlib.suppress(ValueError, AttributeError):
        return bool(
            json.loads(recorded[len(TOOL_ERROR_PREFIX) :]).get("errorType") == "UnknownTool"
        )
    return False


def with_in_doubt(transcript: list[Message], in_doubt: Mapping[str, InDoubt]) -> list[Message]:
    """Copies of the transcript's tool messages of in-doubt calls saying what was done with
    each (`in_doubt`), for the stored transcript only, as with_models."""
    if not in_doubt:
        return transcript
    kept = []
    for message in transcript:
        doubt = (
            in_doubt.get(str(message.get("tool_call_id")))
            if message.get("role") == "tool"
            else None
        )
        kept.append({**message, "in_doubt": doubt.value} if doubt else message)
    return kept
