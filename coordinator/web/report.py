"""`teamctl report --html`: a run's page written as one file, from the dashboard's renderer."""

from __future__ import annotations

from pathlib import Path

from teamctl.coordinator.web.render import report_html
from teamctl.coordinator.web.run_page_data import load_run_view
from teamctl.shared.clock import now_ms
from teamctl.shared.runs.handle import RunHandle


def write_report(run: RunHandle, path: Path) -> None:
    """Read the run and write its report to `path` (replacing it whole: a reader never sees
    half a file)."""
    html = report_html(load_run_view(run), now_ms())
    partial = path.with_name(path.name + ".partial")
    partial.write_text(html, encoding="utf-8")
    partial.replace(path)
