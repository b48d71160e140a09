"""`teamctl runs`: the most recent runs, newest first, as a table or as JSON rows.

Every run shown is read in one pipeline (spec, state, usage) and nothing more: no board, no
bus, no result object, so the verb stays fast with hundreds of runs in Redis."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import click
from teamctl.coordinator.cli.table import print_listing
from teamctl.shared.clock import now_ms
from teamctl.shared.ids import is_safe_id
from teamctl.shared.redis.connection import connect
from teamctl.shared.runs.retention import forget_expired_runs
from teamctl.shared.runs.store import RunSummary, list_runs, run_summaries
from teamctl.shared.text import duration_text, one_line, quoted

if TYPE_CHECKING:
    import redis
    from teamctl.shared.agent.replies import Usage
    from teamctl.shared.runs.run_config import RunSpec
    from teamctl.shared.runs.store import RunState

OBJECTIVE_CHARS = 60
ERROR_CHARS = 500
HEADER = ("run", "started", "duration", "status", "cost", "objective")


def runs_command(redis_url: str, as_json: bool, limit: int) -> None:
    """Print the `limit` most recent runs; "no runs yet" when there are none (on stderr when
    it is a terminal, so a script reading stdout gets nothing)."""
    conn = connect(redis_url)
    forget_expired_runs(conn)  # the index is a sorted set: its members outlive the runs' keys
    runs = _summaries(conn, list_runs(conn, limit))
    if as_json:
        click.echo(json.dumps([_row(run) for run in runs], indent=2))
        return
    print_listing(HEADER, [_cells(run) for run in runs], empty="no runs yet")


def _summaries(conn: redis.Redis, run_ids: list[str]) -> list[RunSummary]:
    """The runs in index order; an id no run could have (added by hand) is an unreadable one."""
    read = {s.run_id: s for s in run_summaries(conn, [r for r in run_ids if is_safe_id(r)])}
    return [
        read[r]
        if is_safe_id(r)
        else RunSummary(r, error=f"invalid run id {quoted(r)} in the runs index")
        for r in run_ids
        if r in read or not is_safe_id(r)
    ]


def _row(run: RunSummary) -> dict[str, Any]:
    """One run as `runs --json` prints it; an unreadable one says why in `error`."""
    records = _records(run)
    if records is None:
        return {
            "run_id": run.run_id,
            "status": "unreadable",
            "rounds": None,
            "objective": None,
            "started_ms": None,
            "duration_ms": None,
            "cost_usd": None,
            "error": run.error,
        }
    spec, state, usage = records
    return {
        "run_id": run.run_id,
        "status": state.status,
        "rounds": state.rounds,
        "objective": spec.objective,
        "started_ms": state.started_ms,
        "duration_ms": _duration_ms(state),
        "cost_usd": usage.cost_usd,
    }


def _cells(run: RunSummary) -> tuple[str, ...]:
    """One run as the table shows it: local start time, duration, status, cost, then its
    objective, or why it is unreadable."""
    run_id = run.run_id if is_safe_id(run.run_id) else quoted(run.run_id)
    records = _records(run)
    if records is None:
        return (run_id, "-", "-", "unreadable", "-", one_line(run.error, ERROR_CHARS))
    spec, state, usage = records
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_ms / 1000))
    return (
        run_id,
        started,
        duration_text(_duration_ms(state)),
        str(state.status),
        usage.cost_text(),
        one_line(spec.objective, OBJECTIVE_CHARS),
    )


def _records(run: RunSummary) -> tuple[RunSpec, RunState, Usage] | None:
    """The run's spec, state and usage; None when they do not parse."""
    if run.spec is None or run.state is None or run.usage is None:
        return None
    return run.spec, run.state, run.usage


def _duration_ms(state: RunState) -> int:
    """From the run's start to its end, or to now while it runs."""
    return (state.ended_ms or now_ms()) - state.started_ms
