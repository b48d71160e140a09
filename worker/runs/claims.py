"""The claims one job holds: the task it was started for, plus tasks it took with team_claim_task.

A claim is a fencing token on the board. The job's heartbeat thread keeps every live claim alive,
and the job runs its claims one after another, each in a fresh member session. Tools change a
claim's fate from inside a session (release it, hand it to another member), so access is locked.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from enum import Enum

MAX_HANDOFFS = 3
"""Each handoff starts a fresh session with its own step budget, so the count must be capped."""


class AttemptAbandoned(Exception):  # noqa: N818  (a signal, not a failure to report)
    """The claim was lost or released: stop without writing anything."""


class HandedOff(Exception):  # noqa: N818  (a signal, not a failure to report)
    """The running task was reassigned: stop this session; the new member takes over."""


class ClaimEnd(Enum):
    """Why a claim stopped being this job's to finish."""

    RELEASED = "released"
    """Given back with team_release_task: the coordinator dispatches the task again."""
    LOST = "lost"
    """A refresh was refused: the coordinator reclaimed it; this job must not write."""
    FINISHED = "finished"
    """Completed or failed by this job."""


@dataclass
class Claim:
    """One task this job holds, and the member it runs as."""

    task_id: str
    token: str
    member_id: str
    end: ClaimEnd | None = None
    handed_to: str | None = None
    """Set by team_reassign_task on the running claim: rerun it as this member."""
    handoffs: int = 0
    """Reassignments so far; bounded so members cannot pass a task back and forth forever."""
    started_s: float = field(default_factory=time.monotonic)

    @property
    def live(self) -> bool:
        return self.end is None


class Claims:
    """The job's claims in run order; the first one is the task the job was enqueued for."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claims: dict[str, Claim] = {}
        self._to_run: list[str] = []

    def add(self, claim: Claim) -> None:
        with self._lock:
            self._claims[claim.task_id] = claim
            self._to_run.append(claim.task_id)

    def get(self, task_id: str) -> Claim | None:
        with self._lock:
            return self._claims.get(task_id)

    def live(self) -> list[Claim]:
        with self._lock:
            return [c for c in self._claims.values() if c.live]

    def end(self, claim: Claim, end: ClaimEnd) -> bool:
        """Mark a live claim ended; False if it had already ended (first end wins)."""
        with self._lock:
            if not claim.live:
                return False
            claim.end = end
            return True

    def next_to_run(self) -> Claim | None:
        """The next live claim to execute, or None when the job is done."""
        with self._lock:
            while self._to_run:
                claim = self._claims[self._to_run.pop(0)]
                if claim.live:
                    return claim
            return None

    def run_again_as(self, claim: Claim, member_id: str) -> None:
        """A reassigned running claim runs next, as its new member, in a fresh session."""
        with self._lock:
            claim.member_id = member_id
            claim.handed_to = None
            self._to_run.insert(0, claim.task_id)
