"""One run from objective to result: plan, approval, rounds, synthesis. The coordinator process.

Every step first looks at what Redis already holds, so `teamctl resume` runs the same code: a
plan is made once, approval is asked once, completed tasks are never dispatched again, and the
synthesis runs once.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import redis
from teamctl.coordinator.runs.approval import ApprovalMode, obtain_plan_decision
from teamctl.coordinator.runs.context import RunContext
from teamctl.coordinator.runs.mcp_listing import McpListingWait
from teamctl.coordinator.runs.remote_model import ModelCall, NoReply, RemoteModel
from teamctl.coordinator.runs.result import build_result, member_results
from teamctl.coordinator.runs.reuse import (
    in_source_order,
    plan_difference,
    recorded_source,
    seed_from_source,
)
from teamctl.coordinator.runs.roles import plan_from_reply, planner_request, synthesizer_request
from teamctl.coordinator.runs.rounds import CANCELLED, LoopState, RoundLoop
from teamctl.coordinator.runs.run_control import resume_hint
from teamctl.coordinator.runs.tool_check import ToolsDoNotImport, WorkerToolCheck
from teamctl.coordinator.runs.worker_wait import WAKE_EVERY_S, WaitCancelled
from teamctl.shared.agent.replies import ModelReply, Usage
from teamctl.shared.clock import now_ms
from teamctl.shared.envelopes import SystemType
from teamctl.shared.errors import (
    BudgetSpent,
    ConfigError,
    InfraError,
    ModelError,
    ReplayDiverged,
    RunFailed,
)
from teamctl.shared.keys import RunKeys
from teamctl.shared.process.hosts import this_host
from teamctl.shared.process.private_files import private_dir
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.model_call_records import CallView, ModelCallRecords, ModelCallRequest
from teamctl.shared.runs.output import RunResult, SynthesisResult
from teamctl.shared.runs.retention import expire_run
from teamctl.shared.runs.run_config import ModelChoice, RunSpec
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.runs.run_refs import check_new_run_id, new_run_id
from teamctl.shared.runs.store import RunEnd, RunStore
from teamctl.shared.task_records import Plan, TaskStatus
from teamctl.shared.team_file import TeamFile
from teamctl.shared.text import shorten
from teamctl.shared.tracing import NO_SPAN, Span
from teamctl.shared.workspace.caps import WorkspaceStore

ENDING_NOTICE = {
    RunStatus.COMPLETED: SystemType.RUN_COMPLETE,
    RunStatus.FAILED: SystemType.RUN_FAILED,
    RunStatus.CANCELLED: SystemType.RUN_CANCELLED,
}
"""The notice announcing that a run ended with a status."""


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for, after the CLI has parsed and validated it."""

    objective: str
    team: TeamFile
    models: ModelChoice
    workspace_root: Path
    run_id: str | None = None
    workspace_store: WorkspaceStore = "local"


def create_run(conn: redis.Redis, request: RunRequest) -> RunSpec:
    """Store the run's spec in Redis; workers read everything they need from it."""
    run_id = check_new_run_id(request.run_id or new_run_id())
    workspace = request.workspace_root / run_id
    if request.workspace_store == "local":
        private_dir(workspace)  # it will hold what the members write: theirs and yours only
    spec = RunSpec(
        run_id=run_id,
        team_id=request.team.team_id,
        objective=request.objective,
        members=request.team.members,
        options=request.team.options,
        models=request.models,
        workspace_dir=str(workspace),
        created_ms=now_ms(),
        hooks=request.team.hooks,
        planner_queue=request.team.planner.queue,
        synthesizer_queue=request.team.synthesizer_queue(),
        limits=request.team.limits,
        workspace_store=request.workspace_store,
        workspace_host=this_host() if request.workspace_store == "local" else None,
    )
    RunStore(conn, RunKeys(run_id)).create(spec)  # no scripts: the driving handle loads them
    return spec


class Coordinator:
    """Drives one run while holding its lease; every step reads and writes Redis."""

    def __init__(self, ctx: RunContext, approval: ApprovalMode) -> None:
        self.ctx = ctx
        self.spec = ctx.run.spec
        self.model = RemoteModel(ctx)
        self.approval = approval
        self.deadline = time.monotonic() + self.spec.options.timeout_s
        """When the run's timeout_s runs out (monotonic), counted from this coordinator's start."""
        self.ended = False
        """Whether this coordinator wrote the run's end (and so owns its expiry)."""
        self.trace: Span = NO_SPAN
        """This coordinator's `invoke_workflow` span, in the run's trace."""

    def run(self) -> RunResult:
        """Run (or resume) to the end; a second coordinator on a live run is refused."""
        with self.ctx.run.lease:
            try:
                self.trace = self._start_trace()
                with self.trace:
                    return self._plan_run_and_synthesize()
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                self.ctx.run.lease.abandon()  # nothing more to say to a Redis that is gone
                raise self._outage_error(exc) from exc
            finally:
                self.ctx.reporter.close()
                if self.ended:
                    expire_run(self.ctx.run.conn, self.spec.run_id, self.spec.options.retention_s)

    def _start_trace(self) -> Span:
        """This coordinator's span in the run's trace: under the one stored with the run (a
        resumed run's), else a new trace, which is stored for every process of the run."""
        tracing, store = self.ctx.tracing, self.ctx.run.store
        if not tracing.on:
            return NO_SPAN
        stored = store.state().traceparent
        span = tracing.start(
            "invoke_workflow",
            parent=stored,
            attributes={
                "gen_ai.operation.name": "invoke_workflow",
                "teamctl.run_id": self.spec.run_id,
                "teamctl.team_id": self.spec.team_id,
                "teamctl.resumed": stored is not None,
                "host.name": socket.gethostname(),
                "process.pid": os.getpid(),
            },
        )
        if stored is None and span.traceparent:
            store.keep_traceparent(span.traceparent)
        return span

    def _outage_error(self, exc: Exception) -> InfraError:
        run_id, outage_s = self.spec.run_id, self.spec.options.redis_outage_s
        return InfraError(
            f"Redis was unreachable for more than redis_outage_s={outage_s:g}s "
            f"({exc}); run {run_id} is left as it was: `teamctl resume {run_id}` "
            "once Redis is back"
        )

    def _end(self, end: RunEnd) -> None:
        """Write the run's end, fenced by the lease; RunFailed if this coordinator lost it."""
        self.ctx.run.store.finish(end)
        self.ended = True
        self.ctx.reporter.phase(end.status)

    def _set_status(self, status: RunStatus) -> None:
        """Move the run to its next phase, and show it."""
        self.ctx.run.store.set_status(status)
        self.ctx.reporter.phase(status)

    def _plan_run_and_synthesize(self) -> RunResult:
        """The run's phases under the lease: plan once, approval, rounds, synthesis."""
        stored = self.ctx.run.store.state()
        if stored.finished:
            raise ConfigError(
                f"run {self.spec.run_id} has already finished; "
                f"`teamctl status {self.spec.run_id}` shows its result"
            )
        self.ctx.reporter.phase(stored.status)  # planning, or where a resumed run stands
        self.deadline = time.monotonic() + self.spec.options.timeout_s
        loop, state = None, None
        try:
            plan = self._plan_once()
            if self._plan_approved(plan):
                self._set_status(RunStatus.RUNNING)
                loop = RoundLoop(self.ctx, self.deadline, self.trace)
                state = loop.run(self._loop_state())
                self._finish(state)
        except WaitCancelled:  # cancelled while the run waited on a worker or its budget
            self.ctx.run.lease.check()
            self._end_without_synthesis(RunStatus.CANCELLED, CANCELLED)
        except ReplayDiverged as exc:  # the run ends where its records part from the code
            if not self.ended:
                self._end_without_synthesis(RunStatus.FAILED, str(exc))
        if loop is not None and state is not None:
            loop.drain(state)  # on_message hooks see the run's end too
        return build_result(self.ctx.run)

    def _plan_once(self) -> Plan:
        """Plan unless a plan is stored; put it on the board unless the board exists."""
        store, board = self.ctx.run.store, self.ctx.run.board
        plan = store.state().plan
        planned_now = plan is None
        if plan is None:
            with self.trace.child("plan") as span, self.ctx.dispatcher.under(span):
                self._check_tools_on_workers()
                plan = self._reused_plan() or self._make_plan()
                span.set({"teamctl.tasks": len(plan.tasks)})
            store.save_plan(plan)
        if plan.tasks and not board.task_ids():
            board.create(plan.tasks)
            planned_now = True
        seed_from_source(self.ctx.run)  # a replay's or fork's, once its tasks exist
        if planned_now:
            self.ctx.hooks.call("after_plan", self.spec.objective, plan)
        return plan

    def _check_tools_on_workers(self) -> None:
        """End the run as a configuration error, before any model call, when a worker of a
        member's queue cannot import its Python tools."""
        failures = WorkerToolCheck(self.ctx).failures(self.deadline)
        if not failures:
            return
        error = f"Python tools do not import where their tasks would run: {'; '.join(failures)}"
        self._end(RunEnd(RunStatus.FAILED, self.spec.options.retention_s, error=error))
        raise ToolsDoNotImport(error)

    def _make_plan(self) -> Plan:
        spec, models = self.spec, self.spec.models
        self.ctx.hooks.call("before_plan", spec.objective, spec.members, spec.options)
        mcp_tools = McpListingWait(self.ctx).member_tools(spec.members, self.deadline)
        request = planner_request(
            models.planner, models.api_base, spec.objective, spec.members, mcp_tools
        ).model_copy(update={"fallbacks": models.planner_fallbacks})
        try:
            reply = self._complete_within_budget(
                ModelCall("planner", spec.planner_queue, request), self.deadline
            )
        except (ModelError, NoReply) as exc:  # nothing was written yet: record why it failed
            self._end(
                RunEnd(
                    RunStatus.FAILED, self.spec.options.retention_s, error=f"planner failed: {exc}"
                )
            )
            raise RunFailed(f"planner failed: {exc}") from exc
        self.ctx.run.store.add_usage(reply.usage)
        return plan_from_reply(reply.content or "", spec.objective, spec.members, spec.options)

    def _reused_plan(self) -> Plan | None:
        """A replay's or fork's plan: its source's. A replay's is what the current code makes of
        the planner's recorded reply, and must be the recorded plan (else it diverged)."""
        lineage = self.spec.lineage
        if lineage is None or not lineage.reuses_plan:
            return None
        source = recorded_source(self.ctx.run, "plan")
        recorded = source.store.state().plan
        if recorded is None:
            self._diverge("diverged at plan: the recorded run has no plan")
        view = ModelCallRecords(source.conn, source.keys).view("planner")
        reply = view.outcome.reply if view.outcome else None
        if reply is None or view.request is None:
            return recorded
        self._keep_reused("planner", ModelCallRequest.model_validate_json(view.request), view)
        if lineage.kind == "fork":
            return recorded
        spec = self.spec
        plan = plan_from_reply(reply.content or "", spec.objective, spec.members, spec.options)
        if plan != recorded:
            self._diverge(f"diverged at plan: {plan_difference(recorded, plan)}")
        return plan

    def _keep_reused(self, call: str, request: ModelCallRequest, source: CallView) -> None:
        """Record a planner's or synthesizer's reply taken from the source as this run's, and
        count it reused."""
        assert source.outcome is not None
        run = self.ctx.run
        ModelCallRecords(run.conn, run.keys, run.scripts).keep(call, request, source.outcome)
        LineageRecords(run.conn, run.keys).note_reused_call(call)

    def _diverge(self, why: str) -> NoReturn:
        """A replay asked for what its source never did: the run fails, saying where and why
        (`_plan_run_and_synthesize` ends it)."""
        raise ReplayDiverged(why)

    def _complete_within_budget(self, call: ModelCall, begin_by: float) -> ModelReply:
        """The planner's or synthesizer's call; one the budget cannot cover pauses the run
        (awaiting_budget) until `teamctl budget` raises it, then is asked again. WaitCancelled
        for a cancel meanwhile, NoReply once the run's time is out."""
        while True:
            try:
                return self.model.complete(call, begin_by)
            except BudgetSpent as exc:
                self._await_budget(call, str(exc))

    def _await_budget(self, call: ModelCall, spent: str) -> None:
        """Paused until the budget lasts again; back to the status the run had."""
        store, run_id = self.ctx.run.store, self.spec.run_id
        was = store.state().status
        self.ctx.run.budget.mark_spent(spent)
        self._set_status(RunStatus.AWAITING_BUDGET)
        self.trace.event("teamctl.run.awaiting_budget")
        self.ctx.run.bus.tell_lead(SystemType.RUN_AWAITING_BUDGET, None, spent)
        self.ctx.reporter.note(f"run {run_id} paused ({spent}): {resume_hint(self.ctx.run)}")
        while self.ctx.run.budget.exceeded():
            if self._should_stop_waiting():
                raise WaitCancelled(call.name)
            if time.monotonic() >= self.deadline:
                raise NoReply(
                    f"the run timed out after {self.spec.options.timeout_s:g}s "
                    "waiting for its budget to be raised"
                )
            store.wait_for_wake(WAKE_EVERY_S)
        self._set_status(was)
        self.trace.event("teamctl.run.resumed")
        self.ctx.run.bus.tell_lead(
            SystemType.RUN_BUDGET_ADDED, None, "the budget was raised: the run goes on"
        )
        self.ctx.reporter.note(f"run {run_id} resumed: its budget was raised")

    def _plan_approved(self, plan: Plan) -> bool:
        """True to dispatch; a rejected plan fails the run, a cancel during the wait ends it."""
        if not self.spec.options.require_plan_approval:
            return True
        if self.spec.lineage is not None and self.spec.lineage.reuses_plan:
            return True  # approved, if it had to be, in the run it comes from
        if self.approval is ApprovalMode.PROMPT:
            self.ctx.reporter.close()  # the prompt needs the lines the live table redraws
        decision = obtain_plan_decision(
            self.ctx.run.store,
            plan,
            self.approval,
            notify=self.ctx.reporter.note,
            should_stop=self._should_stop_waiting,
            phase=self.ctx.reporter.phase,
        )
        if decision.approved:
            self.ctx.run.bus.tell_lead(SystemType.PLAN_APPROVED, None, decision.reason or "")
            return True
        if decision.cancelled:
            self._end_without_synthesis(RunStatus.CANCELLED, CANCELLED)
            return False
        reason = f"plan rejected{': ' + decision.reason if decision.reason else ''}"
        self.ctx.run.bus.tell_lead(SystemType.PLAN_REJECTED, None, reason)
        self._end_without_synthesis(RunStatus.FAILED, reason)
        raise RunFailed(reason)

    def _should_stop_waiting(self) -> bool:
        self.ctx.run.lease.check()
        return self.ctx.run.store.cancelled()

    def _loop_state(self) -> LoopState:
        """Fresh for a new run; on resume, rounds so far and the streams' current ends."""
        conn, keys = self.ctx.run.conn, self.ctx.run.store.keys
        last_event = conn.xrevrange(keys.events, count=1)
        last_message = conn.xrevrange(keys.bus, count=1)
        return LoopState(
            rounds=self.ctx.run.store.state().rounds,
            events_from=last_event[0][0] if last_event else "0-0",
            bus_from=last_message[0][0] if last_message else "0-0",
        )

    def _finish(self, state: LoopState) -> None:
        self.ctx.run.lease.check()  # a coordinator that lost its lease must not write the end
        if state.stop is not None:
            self._end_without_synthesis(state.stop.status, state.stop.error)
        else:
            self._synthesize()

    def _reused_synthesis(self, request: ModelCallRequest) -> ModelReply | None:
        """A replay's synthesis: the recorded reply, when the current code asks the same."""
        lineage = self.spec.lineage
        if lineage is None or lineage.kind != "replay":
            return None
        source = recorded_source(self.ctx.run, "synthesis")
        view = ModelCallRecords(source.conn, source.keys).view("synthesizer")
        if view.outcome is None or view.outcome.reply is None or view.request is None:
            self._diverge("diverged at synthesis: the recorded run made no synthesis")
        asked = ModelCallRequest.model_validate_json(view.request)
        if asked.messages != request.messages:
            self._diverge(
                "diverged at synthesis: the synthesizer's prompt is not the recorded one "
                "(a task's output or the synthesis prompt changed)"
            )
        self._keep_reused("synthesizer", request, view)
        return view.outcome.reply

    def _end_without_synthesis(self, status: RunStatus, error: str) -> None:
        self.ctx.run.board.block_stalled(error)
        self._end(
            RunEnd(
                status,
                self.spec.options.retention_s,
                error=error,
                announce=ENDING_NOTICE[status] if self.ctx.run.bus.enabled else None,
                announce_text=error,
            )
        )

    def _synthesize(self) -> None:
        ctx, models = self.ctx, self.spec.models
        self._set_status(RunStatus.SYNTHESIZING)
        states = ctx.run.board.snapshot()
        not_run = [s for s in states if s.status == TaskStatus.BLOCKED]
        plan = ctx.run.store.state().plan or Plan()
        results = member_results(self.spec, states)
        if self.spec.lineage is not None and self.spec.lineage.kind == "replay":
            # Concurrent tasks start in any order: a replay's are read in its source's.
            results = in_source_order(recorded_source(ctx.run, "synthesis"), results)
        request = synthesizer_request(
            models.synthesizer,
            models.api_base,
            self.spec.objective,
            plan,
            results,
            not_run,
        ).model_copy(update={"fallbacks": models.synthesizer_fallbacks})
        call = ModelCall("synthesizer", self.spec.synthesizer_queue, request)
        # Tasks may end just before the deadline: a worker gets one model timeout to take it.
        begin_by = max(self.deadline, time.monotonic() + self.spec.options.model_timeout_s)
        try:
            with self.trace.child("synthesize") as span, ctx.dispatcher.under(span):
                reused = self._reused_synthesis(request)
                reply = reused or self._complete_within_budget(call, begin_by)
        except (ModelError, NoReply) as exc:  # the board stays; the run records why it failed
            self._end(
                RunEnd(
                    RunStatus.FAILED,
                    self.spec.options.retention_s,
                    error=f"synthesizer failed: {exc}",
                )
            )
            raise RunFailed(f"synthesizer failed: {exc}") from exc
        output = reply.content or ""
        ctx.hooks.call(
            "after_synthesis", self.spec.objective, SynthesisResult(output=output, response=reply)
        )
        all_done = all(s.status == TaskStatus.COMPLETED for s in states)
        # One fenced step: a coordinator that lost its lease meanwhile writes neither the
        # output, nor the synthesis's usage, nor a second run.complete.
        self._end(
            RunEnd(
                RunStatus.COMPLETED if all_done else RunStatus.FAILED,
                self.spec.options.retention_s,
                output=output,
                usage=Usage() if reused else reply.usage,  # a reused reply was paid before
                announce=SystemType.RUN_COMPLETE if ctx.run.bus.enabled else None,
                announce_text=shorten(output),
            )
        )
