"""The one keep-alive thread of a job: a claim's heartbeat, a turn's lease, a model call's beat."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Self

log = logging.getLogger(__name__)


class KeepAlive:
    """Calls `refresh` every ttl/3 on a daemon thread while its `with` block runs, until it
    returns False (what it keeps alive was taken away). Daemon: a SIGKILLed or hung job stops
    refreshing, and its TTL key expires.

    It renews without asking whether the job's main thread still makes progress: nothing that
    thread waits on is unbounded (model calls, MCP calls and bash have their timeouts, and a
    Python tool is abandoned at tool_timeout_s, its thread's own heartbeat cut off)."""

    def __init__(self, refresh: Callable[[], bool], ttl_s: float, what: str) -> None:
        self._renew = refresh
        self.ttl_s = ttl_s
        self.what = what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"teamctl-{what}", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.ttl_s)

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not self._renew():
                    return
            except Exception as exc:  # Redis blip: keep trying until the TTL says otherwise
                log.warning("%s not refreshed: %s", self.what, exc)
