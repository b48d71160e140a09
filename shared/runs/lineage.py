"""Where a replayed or forked run comes from, and what each of its tasks takes from the source
run's records (its output, or the first steps of its journal), so the new run pays only for what
changed and runs every reused step through the current code."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Lineage(BaseModel):
    """A run made from another run's records: a replay (everything recorded), or a fork at a
    point (`plan`, `TASK` or `TASK:STEP`) with changes."""

    kind: Literal["replay", "fork"]
    source_run: str
    at: str | None = None
    """The fork point as given (`plan`, `t2`, `t2:3`); None for a replay."""

    @property
    def reuses_plan(self) -> bool:
        """Whether the plan is the source's (everything but a fork at `plan`)."""
        return self.at != "plan"

    def text(self) -> str:
        """`replay of R` or `forked from R at t2:3`."""
        if self.kind == "replay":
            return f"replay of {self.source_run}"
        return f"forked from {self.source_run} at {self.at}"


class TaskReuse(BaseModel):
    """What one task of a replayed or forked run takes from the same task of its source."""

    output: str | None = None
    """Kept: the task completes with this output, without a session (it does not depend on the
    fork point)."""
    steps: int = 0
    """How many steps of the source's journal the session replays before it goes on live."""
    strict: bool = False
    """A replay's: a model call past the replayed steps is a divergence, never made."""
    source_error: str | None = None
    """The source task failed with this: a strict replay that runs out of steps fails the same
    way instead of diverging."""
    recorded_end: str | None = None
    """Why the records end where they do, when that is not the session's end (a journal cut at
    its cap, a task the source never ran or handed off): what a replay says past them."""
