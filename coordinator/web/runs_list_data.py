"""The runs page's rows: each recent run's status, rounds, tasks by state, cost, start and
duration, read for all of them in one pipelined pass, and where each run's events stream
stands (the page's live stream starts there, beside the stream announcing new runs)."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from teamctl.shared.keys import RUNS_STARTED, RunKeys
from teamctl.shared.runs.store import RunSummary, list_runs, run_summaries

RUNS_SHOWN = 50


@dataclass(frozen=True)
class RunRow:
    summary: RunSummary
    counts: dict[str, int]
    last_event_id: str


def runs_started_id(conn: redis.Redis) -> str:
    """The last entry of the runs-started stream: the runs page hears of runs created after it."""
    last = conn.xrevrange(RUNS_STARTED, count=1)
    return last[0][0] if last else "0-0"


def run_rows(conn: redis.Redis, limit: int = RUNS_SHOWN) -> list[RunRow]:
    """The most recent runs, newest first."""
    run_ids = list_runs(conn, limit)
    # Where each events stream stands first: a change made while the rows are read is then
    # after the page's position, so it still reaches the page.
    pipe = conn.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.xrevrange(RunKeys(run_id).events, count=1)
    last_ids = {
        run_id: last[0][0] if last else "0-0"
        for run_id, last in zip(run_ids, pipe.execute(), strict=True)
    }
    summaries = run_summaries(conn, run_ids)
    for summary in summaries:
        pipe.hgetall(RunKeys(summary.run_id).counts)
    return [
        RunRow(
            summary, {k: int(v) for k, v in counts.items() if int(v) > 0}, last_ids[summary.run_id]
        )
        for summary, counts in zip(summaries, pipe.execute(), strict=True)
    ]


def live_rows(rows: list[RunRow]) -> list[RunRow]:
    """The rows whose run has not finished: the ones the page follows."""
    return [r for r in rows if r.summary.state is not None and not r.summary.state.finished]
