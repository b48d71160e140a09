"""A daemon thread that keeps the job's claims alive, and notices when one was taken away."""

from __future__ import annotations

import logging

from teamctl.shared.board import TaskBoard, WriteOutcome
from teamctl.worker.keepalive import KeepAlive
from teamctl.worker.runs.claims import Claim, ClaimEnd, Claims

log = logging.getLogger(__name__)


class Heartbeat(KeepAlive):
    """Refreshes every live claim each ttl/3; a refused refresh ends that claim as LOST."""

    def __init__(self, board: TaskBoard, claims: Claims, ttl_s: float) -> None:
        super().__init__(self._refresh_live, ttl_s, "heartbeat")
        self.board = board
        self.claims = claims

    def refresh(self, claim: Claim) -> bool:
        """Refresh one claim now; False (and the claim ends LOST) if the board refused it."""
        if not claim.live:
            return False
        outcome = self.board.heartbeat(
            claim.task_id, claim.token, self.ttl_s, member_id=claim.member_id
        )
        if outcome is WriteOutcome.APPLIED:
            return True
        if self.claims.end(claim, ClaimEnd.LOST):
            log.warning(
                "claim on %s was taken back (%s); stopping that attempt",
                claim.task_id,
                outcome.value,
            )
        return False

    def _refresh_live(self) -> bool:
        """Refresh every live claim; a failure of one (a Redis blip) does not stop the others."""
        for claim in self.claims.live():
            try:
                self.refresh(claim)
            except Exception as exc:  # keep trying until the TTL says otherwise
                log.warning("heartbeat for %s failed: %s", claim.task_id, exc)
        return True
