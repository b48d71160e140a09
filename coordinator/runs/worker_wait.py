"""The coordinator's wait on a worker: for a job it queued to be taken and answered.

Three steps ask a worker and wait: the planner's and synthesizer's model calls (remote_model.py),
the Python tool check (tool_check.py) and the MCP listing (mcp_listing.py). What they share is
here: how often they wake, the run's lease (a coordinator that lost it stops), a cancel, the
deadline, and the hint said once when no worker seems to listen on a queue they wait on. What
each waits for, and what its deadline or a cancel means, stays with the wait.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from teamctl.shared.redis.connection import block_ms

if TYPE_CHECKING:  # a name for the type only: reading a run's plan must not load RQ
    from teamctl.coordinator.runs.context import RunContext

WAKE_EVERY_S = 1.0
"""How often a coordinator's wait re-checks its workers, the lease, a cancel and the deadline."""
NO_WORKER_HINT_AFTER_S = 3.0
"""How long a wait may go unanswered before stderr says whether any worker listens."""


class WaitCancelled(Exception):
    """The run was cancelled while the coordinator waited on a worker."""


class WorkerWait:
    """The steps a wait on a worker takes each time it wakes, and what they remember."""

    def __init__(self, ctx: RunContext, deadline: float) -> None:
        self.ctx = ctx
        self.deadline = deadline
        """The monotonic time the wait gives up at; what giving up means is the caller's."""
        self._hint = ctx.no_worker_hint()
        self._hint_from = time.monotonic()
        """When the current job was queued: the hint waits NO_WORKER_HINT_AFTER_S from it."""
        self._hinted = False
        """Whether the hint has nothing more to say about the queues waited on."""

    def left_s(self) -> float:
        """The seconds left until the deadline (negative once it passed)."""
        return self.deadline - time.monotonic()

    def timed_out(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self.deadline

    def check_lease(self) -> None:
        """Keep the run's lease; RunFailed once another coordinator took it over."""
        self.ctx.run.lease.check()

    def cancelled(self) -> bool:
        """Whether somebody asked the run to stop."""
        return self.ctx.run.store.cancelled()

    def check_still_wanted(self, what: str) -> None:
        """Keep the lease, then raise WaitCancelled naming `what` when the run was cancelled."""
        self.check_lease()
        if self.cancelled():
            raise WaitCancelled(what)

    def hint_if_unserved(self, queues: list[str]) -> None:
        """Once the wait has lasted NO_WORKER_HINT_AFTER_S, say on stderr what holds `queues`
        up, until there is nothing more to say (each line is said once)."""
        if not self._hinted and time.monotonic() - self._hint_from > NO_WORKER_HINT_AFTER_S:
            self._hinted = all([self._hint.check(queue) for queue in queues])

    def restart_hint(self) -> None:
        """Count the hint's delay from now: a new job was queued."""
        self._hint_from, self._hinted = time.monotonic(), False

    def sleep(self, wake_key: str, *, stop_at_deadline: bool) -> None:
        """Block until a worker pushes to `wake_key` or WAKE_EVERY_S passes; with
        `stop_at_deadline`, no later than the deadline."""
        wait_s = min(WAKE_EVERY_S, self.left_s()) if stop_at_deadline else WAKE_EVERY_S
        self.ctx.run.store.blocking_conn.blpop([wake_key], timeout=block_ms(wait_s * 1000) / 1000)
