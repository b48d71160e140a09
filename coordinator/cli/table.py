"""Listings for a person and for a script: on a terminal a table (a header row, then one row per
item, each column padded to its widest cell and the last left free: it holds the long text, an
error, an objective); into a pipe or a file the rows alone, tab-separated, so scripts split them
on tabs whatever a cell holds."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from teamctl.shared.text import flat


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The header and the rows as aligned lines, two spaces between columns, no trailing
    blanks; each cell is made printable on one line (a model may have written it)."""
    every = [tuple(header), *(tuple(flat(cell) for cell in row) for row in rows)]
    widths = [max(len(row[i]) for row in every) for i in range(len(header) - 1)]
    return [
        (
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[-1]
        ).rstrip()
        for row in every
    ]


def listing_lines(
    header: Sequence[str], rows: Sequence[Sequence[str]], on_terminal: bool
) -> list[str]:
    """A listing as it is printed: the table with its header for a person at a terminal, the
    rows alone for a script, their cells joined by tabs. Either way each cell is on one line
    with no tab (a model may have written it), and `-` when empty, so no column goes missing."""
    cells = [[flat(cell) or "-" for cell in row] for row in rows]
    return table_lines(header, cells) if on_terminal else ["\t".join(row) for row in cells]


def print_listing(
    header: Sequence[str], rows: Sequence[Sequence[str]], empty: str | None = None
) -> None:
    """Print a listing on stdout, the one place that asks whether stdout is a terminal. With no
    rows, `empty` (if any) instead: on stderr when that is a terminal, so a script reading
    stdout gets nothing, else on stdout."""
    if not rows and empty is not None:
        click.echo(empty, err=sys.stderr.isatty())
        return
    lines = listing_lines(header, rows, sys.stdout.isatty())
    if lines:  # one write: a board of thousands of tasks is thousands of lines
        click.echo("\n".join(lines))
