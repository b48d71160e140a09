"""What a replayed or forked run's coordinator takes from its source run while it runs: the journals
and transcripts its tasks reuse (copied once its board exists), the source's plan and dispatch
order, and what differs when the current code makes another plan."""

from __future__ import annotations

from teamctl.coordinator.runs.result import member_results
from teamctl.shared.errors import ReplayDiverged
from teamctl.shared.runs.handle import RunHandle
from teamctl.shared.runs.journal import PAGE_ENTRIES, journal_entries
from teamctl.shared.runs.lineage_records import LineageRecords
from teamctl.shared.runs.output import MemberResult
from teamctl.shared.task_records import Plan


def recorded_source(run: RunHandle, where: str) -> RunHandle:
    """The run this one was made from; ReplayDiverged (at `where`) once it has expired: its
    records are gone, and nothing of them may be made up."""
    assert run.spec.lineage is not None
    source = RunHandle(run.conn, run.spec.lineage.source_run)
    if not source.store.exists():
        raise ReplayDiverged(
            f"diverged at {where}: the run {source.run_id} this one was made from has expired "
            "(its retention_s ran out), and with it the records this run takes"
        )
    return source


def seed_from_source(run: RunHandle) -> None:
    """Copy from the source the journal steps each task replays and the transcripts of the
    tasks that keep their outputs, once (a resumed coordinator finds them copied). Called once
    the board exists. The copied steps do not count against journal_max_bytes: the cap bounds
    what this run records."""
    records = LineageRecords(run.conn, run.keys)
    if run.spec.lineage is None or records.seeded():
        return
    source = recorded_source(run, "the start")
    for task_id, reuse in records.reuse().items():
        if reuse.steps > 0:
            _copy_journal(run, source, task_id, reuse.steps)
        if reuse.output is not None:
            _copy_transcript(run, source, task_id)
    records.mark_seeded()


def _copy_journal(run: RunHandle, source: RunHandle, task_id: str, steps: int) -> None:
    """The source journal's entries of steps 1..`steps`, in pages (no command holds Redis for a
    whole journal); started again from nothing if a coordinator died half-way."""
    kept = [
        entry.model_dump_json(exclude_defaults=True)
        for entry in journal_entries(run.conn, source.keys, task_id)
        if entry.step <= steps
    ]
    key = run.keys.journal(task_id)
    pipe = run.conn.pipeline(transaction=False)
    pipe.delete(key)
    for at in range(0, len(kept), PAGE_ENTRIES):
        pipe.rpush(key, *kept[at : at + PAGE_ENTRIES])
    pipe.hset(run.keys.task(task_id), "journal_bytes", 0)
    pipe.execute()


def _copy_transcript(run: RunHandle, source: RunHandle, task_id: str) -> None:
    """A kept task's transcript is its source's (the worker that completes it stores it again,
    fenced by its claim)."""
    text = run.conn.get(source.keys.transcript(task_id))
    if text is not None:
        run.conn.set(run.keys.transcript(task_id), text)


def in_source_order(source: RunHandle, results: list[MemberResult]) -> list[MemberResult]:
    """A replay's member results in the order its source dispatched the same tasks (a task the
    source did not run goes last): concurrent tasks start in any order."""
    order = {
        r.task_id: i for i, r in enumerate(member_results(source.spec, source.board.snapshot()))
    }
    return sorted(results, key=lambda r: order.get(r.task_id, len(order)))


def plan_difference(recorded: Plan, made: Plan) -> str:
    """The first way the current code's plan differs from the recorded one, in a few words."""
    before = {t.id: t for t in recorded.tasks}
    after = {t.id: t for t in made.tasks}
    if list(before) != list(after):
        added = [t for t in after if t not in before]
        removed = [t for t in before if t not in after]
        if added or removed:
            return f"tasks added {added or 'none'}, removed {removed or 'none'}"
        return "the tasks come in another order"
    for task_id, task in before.items():
        changed = [
            name
            for name in ("member_id", "task", "context", "depends_on")
            if getattr(task, name) != getattr(after[task_id], name)
        ]
        if changed:
            return f"task {task_id} changed its {', '.join(changed)}"
    return "the plan's fallback or raw text changed"
