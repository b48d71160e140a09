"""Plain tables for a terminal: a header row, then one row per item, each column padded to its
widest cell and the last left free (it holds the long text: an error, an objective)."""

from __future__ import annotations

from collections.abc import Sequence

from teamctl.shared.text import flat


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and the rows as aligned lines, two spaces between columns, no trailing
    blanks; each cell is made printable on one line (a model may have written it)."""
    every = [tuple(header), *(tuple(flat(cell) for cell in row) for row in rows)]
    widths = [max(len(row[i]) for row in every) for i in range(len(header) - 1)]
    return [("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
             + "  " + row[-1]).rstrip() for row in every]
