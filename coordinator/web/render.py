"""HTML from the web view's templates: the run page of `teamctl dashboard` and the report file
of `teamctl report --html` come from the same templates. Autoescape is on for every template:
task outputs, messages and transcripts are model-written, so untrusted."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any

import jinja2
from teamctl.coordinator.web import svg_dag, timeline
from teamctl.coordinator.web.run_page_data import RunView
from teamctl.shared.runs.journal import in_doubt_label
from teamctl.shared.text import duration_text

STATIC = "static"


@functools.cache  # compiled once per process
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("teamctl.coordinator.web", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=when, duration=duration, as_text=as_text, in_doubt=in_doubt_label)
    return env


def static_text(name: str) -> str:
    """A file of the package's static folder (the stylesheet the report inlines)."""
    return files("teamctl.coordinator.web").joinpath(STATIC, name).read_text(encoding="utf-8")


def render(template: str, /, **values: Any) -> str:
    return environment().get_template(template).render(**values)


def run_values(view: RunView, now_ms: int) -> dict[str, Any]:
    """What the run templates draw: the view, its DAG and its timeline."""
    return {
        "view": view,
        "dag": svg_dag.lay_out(view.tasks),
        # A run that ended stops its timeline there: an attempt whose end left the stream
        # is drawn to the run's end, not stretched to today.
        "timeline": timeline.lay_out(
            view.attempts, view.state.started_ms, view.state.ended_ms or now_ms
        ),
        "now_ms": now_ms,
    }


def report_html(view: RunView, now_ms: int) -> str:
    """The run as one self-contained file: inline CSS and SVG, no script, nothing fetched."""
    return render(
        "report.html",
        standalone=True,
        css=static_text("style.css"),
        member=None,
        type_=None,
        **run_values(view, now_ms),
    )


def when(ms: int | None) -> str:
    """Epoch ms as a UTC time ('-' for none)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(ms: int | None) -> str:
    """A duration as the CLI's tables spell it ('-' for none)."""
    return "-" if ms is None or ms < 0 else duration_text(ms)


def as_text(value: object) -> str:
    """A transcript field as text: strings as they are, anything else as indented JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False)
