"""A run's timeline laid out for SVG: one lane per worker process (host:pid), one bar per
attempt on the lane of the worker that claimed it, coloured by outcome; reclaims and refused
stale writes marked at the end of the attempt they concern. Geometry only: the template draws
it, so every text a model or a host wrote is escaped there."""

from __future__ import annotations

from dataclasses import dataclass

from teamctl.coordinator.web.run_page_data import AttemptRow

WIDTH_PX = 900
LABEL_PX = 150
"""Room at the left for the lane's worker name."""
RIGHT_PX = 40
"""Room at the right for the last tick's label."""
LANE_PX = 28
BAR_PX = 18
AXIS_PX = 24
MIN_BAR_PX = 3
"""A very short attempt still shows."""


@dataclass(frozen=True)
class Bar:
    """One attempt drawn: where, how long, and what it was."""

    x: float
    y: float
    width: float
    attempt: AttemptRow

    @property
    def label(self) -> str:
        return f"{self.attempt.task_id} #{self.attempt.number}"

    @property
    def end_x(self) -> float:
        return self.x + self.width

    @property
    def labelled(self) -> bool:
        """Wide enough to carry its label (a narrow bar keeps it in its tooltip)."""
        return self.width >= 7 * len(self.label)


@dataclass(frozen=True)
class Lane:
    worker: str
    y: float


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True)
class Timeline:
    width: float
    height: float
    lanes: list[Lane]
    bars: list[Bar]
    ticks: list[Tick]


def lay_out(attempts: list[AttemptRow], start_ms: int, now_ms: int) -> Timeline:
    """The attempts on lanes by worker, time running from `start_ms` (the run's start) to the
    last end seen (or `now_ms` while an attempt runs)."""
    workers = sorted({a.worker for a in attempts})
    lane_y = {w: AXIS_PX + i * LANE_PX for i, w in enumerate(workers)}
    first = min([start_ms or now_ms, *(a.start_ms for a in attempts)])
    last = max([first + 1, *((a.end_ms or now_ms) for a in attempts)])
    scale = (WIDTH_PX - LABEL_PX - RIGHT_PX) / (last - first)
    bars = []
    for attempt in attempts:
        x = LABEL_PX + (attempt.start_ms - first) * scale
        width = max(MIN_BAR_PX, ((attempt.end_ms or now_ms) - attempt.start_ms) * scale)
        bars.append(
            Bar(
                x=round(x, 1),
                y=lane_y[attempt.worker] + (LANE_PX - BAR_PX) / 2,
                width=round(width, 1),
                attempt=attempt,
            )
        )
    return Timeline(
        width=WIDTH_PX,
        height=AXIS_PX + max(1, len(workers)) * LANE_PX + 4,
        lanes=[Lane(w, lane_y[w]) for w in workers],
        bars=bars,
        ticks=ticks(first, last, scale),
    )


def ticks(first_ms: int, last_ms: int, scale: float, count: int = 5) -> list[Tick]:
    """A few time marks along the axis, in seconds since the start."""
    span = last_ms - first_ms
    return [
        Tick(
            x=round(LABEL_PX + i * span / count * scale, 1), label=f"{i * span / count / 1000:.1f}s"
        )
        for i in range(count + 1)
    ]
