"""Plain tables for a terminal: a header row, then one row per item, each column padded to its
widest cell and the last left free (it holds the long text: an error, an objective); and the
durations and costs they show, spelled one way everywhere."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from teamctl.shared.text import flat

if TYPE_CHECKING:
    from teamctl.shared.agent.replies import Usage


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and the rows as aligned lines, two spaces between columns, no trailing
    blanks; each cell is made printable on one line (a model may have written it)."""
    every = [tuple(header), *(tuple(flat(cell) for cell in row) for row in rows)]
    widths = [max(len(row[i]) for row in every) for i in range(len(header) - 1)]
    return [("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
             + "  " + row[-1]).rstrip() for row in every]


def duration_text(duration_ms: int) -> str:
    """12.3s, 4m05s or 2h03m: short enough for a column, exact enough to compare runs."""
    seconds = max(0, duration_ms) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes}m{int(seconds % 60):02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def cost_cell(usage: Usage) -> str:
    """The run's cost in dollars; `unpriced` when no call had a known price, and a `+` when
    some did not (the figure is then a lower bound)."""
    if usage.unpriced and not usage.cost_usd:
        return "unpriced"
    return f"${usage.cost_usd:.4f}{'+' if usage.unpriced else ''}"
