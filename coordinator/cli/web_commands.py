"""`teamctl report` (a run as one HTML file) and `teamctl dashboard` (the live web view). The
dashboard's server (Starlette, uvicorn: the `teamctl[web]` extra) is imported only when it runs,
so no other verb pays for it or needs it."""

from __future__ import annotations

from pathlib import Path

import click
from teamctl.coordinator.cli.app import fail_cleanly, force_option, redis_url_option
from teamctl.shared.errors import ConfigError
from teamctl.shared.redis.choice import resolve_redis_url
from teamctl.shared.settings import Settings


@click.command("report")
@click.argument("run_id")
@click.option("--html", "html_path", type=click.Path(path_type=Path), required=True,
              help="The HTML file to write: one self-contained page (no script, nothing "
                   "fetched) with the plan, the timeline and every task.")
@redis_url_option
@force_option
@fail_cleanly
def report(run_id: str, html_path: Path, redis_url: str | None, force: bool,
           settings: Settings) -> None:
    """Write RUN_ID as one self-contained HTML file to attach to a ticket: its plan as a graph,
    a timeline of every attempt by worker, the bus and each task's input, output and
    transcript."""
    from teamctl.coordinator.web.report import write_report
    from teamctl.shared.redis.connection import connect
    from teamctl.shared.runs.handle import RunHandle

    if html_path.exists() and not force:
        raise ConfigError(f"{html_path} exists; pass --force to overwrite it")
    run = RunHandle.existing(connect(resolve_redis_url(redis_url, settings)), run_id)
    write_report(run, html_path)
    click.echo(str(html_path))
