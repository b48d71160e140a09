"""The rows a benchmark hands to the report: a figure, its baseline from the same run, a goal."""

from __future__ import annotations

from pydantic import BaseModel, computed_field


class BenchFigure(BaseModel):
    """One measured figure beside the baseline it is judged against (both from the same run)."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_name: str = ""
    goal: str = ""
    met: bool | None = None
    """None when the figure has no goal: it is shown for context."""
    note: str = ""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ratio(self) -> float | None:
        """value / baseline, when there is a non-zero baseline."""
        return self.value / self.baseline if self.baseline else None


def print_figures(rows: list[BenchFigure]) -> int:
    """A module's figures on stdout, one per line (`python -m bench.bench_X`); exit code 0."""
    for row in rows:
        base = (
            f" (baseline {row.baseline:.2f} {row.unit}, {row.baseline_name})"
            if row.baseline is not None
            else ""
        )
        ratio = f", ratio {row.ratio:.2f}" if row.ratio is not None else ""
        goal = f"; goal {row.goal}: {'ok' if row.met else 'MISSED'}" if row.goal else ""
        note = f" [{row.note}]" if row.note else ""
        print(f"{row.name}: {row.value:.2f} {row.unit}{base}{ratio}{goal}{note}")
    return 0


class BenchSection(BaseModel):
    """One benchmark's figures, or the error that stopped it (the report goes on without it)."""

    title: str
    figures: list[BenchFigure] = []
    notes: list[str] = []
    error: str = ""
    seconds: float = 0.0
