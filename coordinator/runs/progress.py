"""What `teamctl run` shows on stderr: a live rich table on a terminal, plain lines otherwise."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
from teamctl.coordinator.advice import Advice, for_this_shell
from teamctl.shared.clock import now_ms
from teamctl.shared.runs.run_records import RunStatus
from teamctl.shared.task_records import TaskState, TaskStatus
from teamctl.shared.text import flat, printable

STATUS_STYLE = {
    TaskStatus.COMPLETED: "green",
    TaskStatus.FAILED: "red",
    TaskStatus.BLOCKED: "yellow",
    TaskStatus.IN_PROGRESS: "cyan",
}
PHASE_TEXT = {
    RunStatus.PLANNING: "planning",
    RunStatus.AWAITING_APPROVAL: "waiting for approval",
    RunStatus.RUNNING: "dispatching",
    RunStatus.SYNTHESIZING: "synthesizing",
    RunStatus.AWAITING_BUDGET: "paused: budget spent",
}
"""The table's title for each phase of a run (an ended run shows its status as it is)."""


class Reporter:
    """Progress for a person; `live` draws a table (task, member, status, attempts, elapsed)
    titled with the run's phase."""

    def __init__(
        self, live: bool, log: logging.Logger | None = None, advice: Advice | None = None
    ) -> None:
        self.live = live
        self.log = log
        """Where notes go instead of stderr (the Python API: the caller's logging)."""
        self.advice = advice or Advice()
        """How the commands a note suggests are spelled for the person reading it."""
        self._live: Any = None
        self._states: list[TaskState] = []
        self._phase: RunStatus | None = None

    @classmethod
    def for_stderr(cls, advice: Advice | None = None) -> Reporter:
        return cls(live=sys.stderr.isatty(), advice=advice or for_this_shell())

    @classmethod
    def to_log(cls, log: logging.Logger) -> Reporter:
        """Notes as log records, no table: a library must not write to its caller's stderr."""
        return cls(live=False, log=log, advice=for_this_shell())

    def note(self, text: str) -> None:
        """One line on stderr (above the live table, if any), or a log record; what a model
        wrote in it cannot act on the terminal."""
        text = printable(self.advice.spell(text))
        if self.log is not None:
            self.log.info("%s", text)
        elif self._live is not None:
            self._live.console.print(f"teamctl: {text}", markup=False, highlight=False)
        else:
            click.echo(f"teamctl: {text}", err=True)

    def warn(self, text: str) -> None:
        """A note the caller must not miss (worker processes started or replaced outside
        it): on stderr as any note, or a warning record, which Python shows without set-up."""
        if self.log is not None:
            self.log.warning("%s", printable(self.advice.spell(text)))
        else:
            self.note(text)

    def tick(self, states: list[TaskState]) -> None:
        """Redraw the table from the board's current states."""
        self._states = states
        self._draw()

    def phase(self, status: RunStatus) -> None:
        """Show the run's status (planning, waiting for approval, ...) as the table's title,
        drawn at once: planning has no tasks to tick for yet."""
        self._phase = status
        self._draw()

    def _draw(self) -> None:
        if not self.live:
            return
        if self._live is None:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(stderr=True), auto_refresh=False)
            self._live.start()
        self._live.update(_table(self._states, self._phase), refresh=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _table(states: list[TaskState], phase: RunStatus | None = None) -> Any:
    from rich.table import Table
    from rich.text import Text

    title = PHASE_TEXT.get(phase, str(phase)) if phase is not None else None
    table = Table("task", "member", "status", "attempts", "elapsed", box=None, title=title)
    now = now_ms()
    for state in states:
        end_ms = state.end_ms or (now if state.start_ms else 0)
        elapsed = f"{(end_ms - state.start_ms) / 1000:.1f}s" if state.start_ms else "-"
        style = STATUS_STYLE.get(state.status, "")
        # Text, not a str: rich would read a [style] in it as markup.
        table.add_row(
            Text(flat(state.task_id)),
            Text(flat(state.claimed_by or state.member_id) or "-"),
            f"[{style}]{state.status.value}[/]" if style else state.status.value,
            str(state.attempts),
            elapsed,
        )
    return table
