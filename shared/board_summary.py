"""A board as a status read shows it, without reading every task: tasks per status, and the
tasks that matter (in progress, then the first failed or blocked ones) with the fields a status
row shows, all as they stood at one instant.

The board's scripts keep what this reads up to date as they move tasks: the counts hash, the
running set and the unanswered index (shared/keys.py). A read is one `summary.lua` call for the
ids, then one that reads those tasks, again while the tasks that matter changed meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.shared.board import STATUS_COUNTS, TaskBoard
from teamctl.shared.task_records import USAGE_FIELD_PREFIX, TaskState, TaskStatus

ROW_FIELDS = (
    "task_id",
    "member_id",
    "status",
    "pos",
    "claimed_by",
    "attempts",
    "start_ms",
    "end_ms",
    "duration_ms",
    "error",
    "model",
    "fallback_from",
    "waiting_model",
    "waiting_until_ms",
    *(f"{USAGE_FIELD_PREFIX}{name}" for name in ("prompt_tokens", "completion_tokens")),
    *(f"{USAGE_FIELD_PREFIX}{name}" for name in ("cost_usd", "unpriced")),
)
"""The task fields a status row shows (its task text, context and output are left unread)."""
SUMMARY_ROUNDS = 4
"""Calls after the first: each reads the tasks the one before named; past them the summary
shows the tasks that matter it read (one instant's view, less a task claimed meanwhile)."""


@dataclass(frozen=True)
class BoardSummary:
    """The board at one instant: tasks per status, how many failed or blocked tasks the index
    holds, and the tasks that matter in plan order (partial states: ROW_FIELDS only)."""

    counts: dict[TaskStatus, int]
    unanswered: int
    tasks: list[TaskState]

    @property
    def total(self) -> int:
        """Every task on the board."""
        return sum(self.counts.values())

    @property
    def indexed(self) -> bool:
        """Whether the unanswered index holds every failed and blocked task: a board made
        before the index was kept has none, and only a whole read lists its failures."""
        ended = self.counts.get(TaskStatus.FAILED, 0) + self.counts.get(TaskStatus.BLOCKED, 0)
        return self.unanswered == ended


def read_summary(board: TaskBoard, unanswered_rows: int) -> BoardSummary:
    """The board's counts and its tasks that matter: every one in progress, and the first
    `unanswered_rows` failed or blocked ones."""
    if unanswered_rows < 1:  # ZRANGE 0 -1 would return the whole index
        raise ValueError(f"unanswered_rows is {unanswered_rows}; a summary lists at least 1")
    k = board.keys
    read: dict[str, dict[str, str]] = {}
    wanted: list[str] = []
    for round_no in range(SUMMARY_ROUNDS + 1):
        reply = board.scripts["summary"](
            keys=[k.counts, k.running, k.unanswered, *(k.task(t) for t in wanted)],
            args=[unanswered_rows, *ROW_FIELDS],
        )
        raw_counts, running, unanswered, first_unanswered, *values = reply
        read = {
            t: {f: v for f, v in zip(ROW_FIELDS, row, strict=True) if v is not None}
            for t, row in zip(wanted, values, strict=True)
        }
        now_wanted = sorted({*running, *first_unanswered})
        if set(now_wanted) <= read.keys() or round_no == SUMMARY_ROUNDS:
            break
        wanted = now_wanted
    flat_counts = dict(zip(raw_counts[::2], raw_counts[1::2], strict=True))
    counts = STATUS_COUNTS.validate_python(flat_counts)
    matter = set(now_wanted)
    states = [board.parse(raw) for t, raw in read.items() if t in matter and raw.get("status")]
    states.sort(key=lambda s: int(read[s.task_id].get("pos") or 0))
    return BoardSummary(
        counts={status: n for status, n in counts.items() if n > 0},
        unanswered=int(unanswered),
        tasks=states,
    )
