"""Builds the result JSON from Redis alone, so `status --json` can rebuild it later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teamctl.shared.agent.model_usage import usage_by_model
from teamctl.shared.agent.replies import ModelReply
from teamctl.shared.clock import now_ms
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.model_call_records import ModelCallRecords
from teamctl.shared.runs.output import MemberResult, RunResult, TaskStateView
from teamctl.shared.runs.run_config import RunSpec
from teamctl.shared.runs.transcripts import Transcripts
from teamctl.shared.task_records import Plan, TaskState, TaskStatus


def member_results(
    spec: RunSpec,
    states: list[TaskState],
    transcripts: Mapping[str, list[dict[str, Any]]] | None = None,
) -> list[MemberResult]:
    """Executed tasks (completed or failed) in dispatch order, as AI4J: by when their (last)
    claim started; a task failed at dispatch (unknown member) counts from its failure; ties in
    plan order. With `transcripts`, each carries its member's transcript."""
    ran = [
        (position, s)
        for position, s in enumerate(states)
        if s.status in (TaskStatus.COMPLETED, TaskStatus.FAILED)
    ]
    ran.sort(key=lambda item: (item[1].start_ms or item[1].end_ms, item[0]))
    kept = transcripts or {}
    return [
        member_result(spec, s).model_copy(update={"transcript": kept.get(s.task_id)})
        for _, s in ran
    ]


def member_result(spec: RunSpec, state: TaskState) -> MemberResult:
    """One ended task as a member result; an unknown member keeps the planner's raw id."""
    member = spec.member(state.claimed_by) if state.claimed_by else None
    if member is None and state.claimed_by is None:
        member = spec.member_for(state.member_id)
    return MemberResult(
        task_id=state.task_id,
        member_id=member.id if member else state.member_id,
        member_name=member.display_name if member else None,
        task=state.task,
        task_status=state.status,
        output=state.output,
        error=state.error,
        duration_ms=state.duration_ms,
        attempts=state.attempts,
        usage=state.usage,
        model=state.model,
        fallback_from=state.fallback_from,
    )


def ended_member_result(run: RunHandle, state: TaskState) -> MemberResult:
    """One ended task as a member result with its stored transcript (what `after_task` hooks
    receive: the same as the task's entry in the run's result)."""
    kept = Transcripts(run.conn, run.keys, run.scripts).load_many([state.task_id])
    return member_result(run.spec, state).model_copy(update={"transcript": kept.get(state.task_id)})


def task_state_view(state: TaskState) -> TaskStateView:
    """A task as the result JSON's task_states shows it."""
    return TaskStateView(
        task_id=state.task_id,
        status=state.status,
        claimed_by=state.claimed_by,
        phase=state.phase,
        detail=state.detail,
        percent=state.percent,
        heartbeat_count=state.heartbeat_count,
        attempts=state.attempts,
        output=state.output,
        error=state.error,
        duration_ms=state.duration_ms,
        model=state.model,
        fallback_from=state.fallback_from,
        waiting_model=state.waiting_model,
        waiting_until_ms=state.waiting_until_ms,
    )


def build_result(run: RunHandle, *, full: bool = True) -> RunResult:
    """The result object of a run, live or ended, from its keys alone; without `full`, the
    members' transcripts and the run's messages are left out (what a person's `teamctl status`
    shows uses neither, and on a big run they are most of what there is to read)."""
    store, spec, run_id = run.store, run.spec, run.run_id
    state = store.state()
    states = run.board.snapshot()
    ended_ms = state.ended_ms or now_ms()
    transcripts = (
        Transcripts(run.conn, run.keys, run.scripts).load_many([s.task_id for s in states])
        if full
        else {}
    )
    return RunResult(
        team_id=spec.team_id,
        run_id=run_id,
        objective=spec.objective,
        status=state.status,
        plan=state.plan or Plan(),
        member_results=member_results(spec, states, transcripts),
        task_states=[task_state_view(s) for s in states],
        messages=run.bus.messages() if full else [],
        rounds=state.rounds,
        output=state.output,
        error=state.error,
        synthesis=_synthesis(run),
        total_duration_ms=ended_ms - state.started_ms,
        usage=store.usage(),
        usage_by_model=usage_by_model(run.conn, run.keys),
        lineage=spec.lineage,
        forks=LineageRecords(run.conn, run.keys).forks(),
    )


def _synthesis(run: RunHandle) -> ModelReply | None:
    """The synthesizer's reply, once the run's output is written from it."""
    outcome = ModelCallRecords(run.conn, run.keys, run.scripts).view("synthesizer").outcome
    return outcome.reply if outcome is not None else None


def result_json(result: RunResult) -> str:
    """The result as `run --json` and `status --json` print it."""
    return result.model_dump_json(by_alias=True, indent=2)
