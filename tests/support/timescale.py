"""One time scale for the tests that exercise time: heartbeat TTLs, leases, grace periods, outage
bounds and scripted model latencies are the real defaults times TEAMCTL_TEST_TIME_SCALE.

Every run of the suite takes them at 0.05x (fast: a heartbeat of 1.5 s, model calls of tenths of a
second); the realistic tier runs the tests marked `realistic` at 1x, the defaults users live with
(heartbeat 30 s, lease 15 s, model calls of several seconds):

    TEAMCTL_TEST_TIME_SCALE=1 pytest -m realistic
"""

from __future__ import annotations

import os

from teamctl.shared.runs.options import RunOptions

SCALE_ENV = "TEAMCTL_TEST_TIME_SCALE"
FAST_SCALE = 0.05
_SCALE = float(os.environ.get(SCALE_ENV) or FAST_SCALE)
"""Read once, at collection: each test's environment is cleaned of TEAMCTL_* variables."""


def time_scale() -> float:
    """The factor in force: FAST_SCALE unless the environment said otherwise."""
    return _SCALE


def scaled(seconds: float, floor_s: float = 0.0) -> float:
    """`seconds` at the current scale, never below `floor_s` (what a process start or a loaded
    machine's scheduling needs, whatever the scale)."""
    return max(floor_s, seconds * time_scale())


def timing_options(**extra: object) -> dict[str, object]:
    """The run options that are durations, at the current scale (at 1x: the defaults)."""
    defaults = RunOptions()
    return {
        "heartbeat_ttl_s": scaled(defaults.heartbeat_ttl_s, 1.0),
        "lease_ttl_s": scaled(defaults.lease_ttl_s, 1.0),
        "redis_outage_s": scaled(defaults.redis_outage_s, 2.0),
        **extra,
    }
