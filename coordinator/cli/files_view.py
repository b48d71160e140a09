"""`teamctl files RUN [PATH]`: a run's workspace files, listed or printed, wherever they live.

Members wrote them: on a terminal a file is shown with nothing a terminal would act on; piped or
redirected, it is written byte for byte (`teamctl files RUN report.md > report.md`)."""

from __future__ import annotations

import sys

import click
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.shared.runs.run_files import RunFiles
from teamctl.shared.text import flat, printable


def files_command(redis_url: str, run_id: str | None, path: str | None) -> None:
    """List the run's files (path, bytes, version), or print the one at `path`."""
    run = existing_run(redis_url, run_id)
    files = RunFiles(run.conn, run.spec)
    if path is not None:
        show(files.read(path))
        return
    entries = files.listing()
    click.echo(f"{len(entries)} files in {flat(files.where)}", err=True)
    for entry in entries:
        version = str(entry.version) if entry.version else "-"
        click.echo(f"{entry.size_bytes:>10}  v{version:<5} {flat(entry.path)}")


def show(data: bytes) -> None:
    """The file on stdout: whole when it goes to a file or a pipe, made safe on a terminal."""
    if sys.stdout.isatty():
        click.echo(printable(data.decode("utf-8", errors="replace")), nl=False)
        return
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
