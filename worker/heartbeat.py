"""A daemon thread that keeps a claim alive, and notices when the claim was taken away."""

from __future__ import annotations

import logging
import threading

from shared.board import TaskBoard, WriteOutcome

log = logging.getLogger(__name__)


class Heartbeat:
    """Refreshes the heartbeat key every ttl/3; `lost` is set once a refresh is refused."""

    def __init__(self, board: TaskBoard, task_id: str, token: int, ttl_s: float) -> None:
        self.board = board
        self.task_id = task_id
        self.token = token
        self.ttl_s = ttl_s
        self.lost = threading.Event()
        self._stop = threading.Event()
        # Daemon: a SIGKILLed or hung job simply stops heartbeating and gets reclaimed.
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{task_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.ttl_s)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                outcome = self.board.heartbeat(self.task_id, self.token, self.ttl_s)
            except Exception as exc:  # Redis blip: keep trying until the TTL says otherwise
                log.warning("heartbeat for %s failed: %s", self.task_id, exc)
                continue
            if outcome is WriteOutcome.STALE:
                log.warning("claim on %s was reclaimed; stopping this attempt", self.task_id)
                self.lost.set()
                return
