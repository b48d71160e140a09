"""`teamctl report` (a run as one HTML file) and `teamctl dashboard` (the live web view). The
dashboard's server (Starlette, uvicorn: the `teamctl[web]` extra) is imported only when it runs,
so no other verb pays for it or needs it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from teamctl.coordinator.cli.app import fail_cleanly, redis_url_option
from teamctl.shared.redis.choice import attach_redis_url

if TYPE_CHECKING:
    from teamctl.shared.settings import Settings

WEB_EXTRA_MISSING = "pip install 'teamctl[web]'"
"""The one line `teamctl dashboard` prints (exit 2) when the web extra is not installed."""


@click.command("report")
@click.argument("run_id", required=False)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path),
    required=True,
    help="The HTML file to write: one self-contained page (no script, nothing "
    "fetched) with the plan, the timeline and every task.",
)
@redis_url_option
@click.option("--force", is_flag=True, help="Overwrite the HTML file if it exists.")
@fail_cleanly
def report(
    run_id: str | None, html_path: Path, redis_url: str | None, force: bool, settings: Settings
) -> None:
    """Write RUN_ID (default: the last run) as one self-contained HTML file to attach to a
    ticket: its plan as a graph, a timeline of every attempt by worker, the bus and each task's
    input, output and transcript."""
    from teamctl.coordinator.cli.named_run import existing_run
    from teamctl.coordinator.web.report import write_report
    from teamctl.shared.errors import ConfigError

    if html_path.exists() and not force:
        raise ConfigError(f"{html_path} exists; pass --force to overwrite it")
    run = existing_run(attach_redis_url(redis_url, settings), run_id)
    write_report(run, html_path)
    click.echo(str(html_path))


@click.command("dashboard")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default: the pages show what models wrote).",
)
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=8750,
    show_default=True,
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--allow-control",
    is_flag=True,
    help="Add cancel, approve/reject and send to the pages; each needs the token "
    "printed at start typed in its form (POST only).",
)
@click.option(
    "--no-auth",
    "no_auth",
    is_flag=True,
    help="Serve the pages and live updates without the token: a read-only view to "
    "share on a trusted host. Control still needs the token.",
)
@redis_url_option
@fail_cleanly
def dashboard(
    host: str,
    port: int,
    allow_control: bool,
    no_auth: bool,
    redis_url: str | None,
    settings: Settings,
) -> None:
    """Serve a live web view of runs and teams (read-only unless --allow-control); needs
    `pip install 'teamctl[web]'`.

    Private: open the URL it prints, which carries a token made at each start (your browser
    keeps it in a cookie); a request without it gets 401."""
    try:
        from teamctl.coordinator.web.serve import serve
    except ImportError as exc:
        if exc.name in ("starlette", "uvicorn") or (exc.name or "").startswith(
            ("starlette.", "uvicorn.")
        ):
            click.echo(WEB_EXTRA_MISSING, err=True)
            sys.exit(2)
        raise
    serve(
        attach_redis_url(redis_url, settings),
        host=host,
        port=port,
        allow_control=allow_control,
        open_reads=no_auth,
    )
