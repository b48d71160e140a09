"""`teamctl files RUN [PATH]`: a run's workspace files, listed or printed, wherever they live.

Members wrote them: on a terminal a file is shown with nothing a terminal would act on; piped or
redirected, it is written byte for byte (`teamctl files RUN report.md > report.md`)."""

from __future__ import annotations

import sys

import click
from teamctl.coordinator.cli.named_run import existing_run
from teamctl.coordinator.cli.table import print_listing
from teamctl.shared.runs.run_files import RunFiles
from teamctl.shared.text import counted, flat, printable

HEADER = ("bytes", "version", "path")


def files_command(redis_url: str, run_id: str | None, path: str | None) -> None:
    """List the run's files (bytes, version, path), or print the one at `path`."""
    run = existing_run(redis_url, run_id)
    files = RunFiles(run.conn, run.spec)
    if path is not None:
        show(files.read(path))
        return
    entries = files.listing()
    click.echo(f"{counted(len(entries), 'file')} in {flat(files.where)}", err=True)
    # A workspace on disk keeps no versions: its column says `-`.
    print_listing(
        HEADER,
        [
            (str(entry.size_bytes), str(entry.version) if entry.version else "-", entry.path)
            for entry in entries
        ],
    )


def show(data: bytes) -> None:
    """The file on stdout: whole when it goes to a file or a pipe, made safe on a terminal."""
    if sys.stdout.isatty():
        click.echo(printable(data.decode("utf-8", errors="replace")), nl=False)
        return
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
