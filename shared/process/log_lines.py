"""Log lines as a terminal shows them: the CLI and every worker send their log records to stderr
through one handler whose formatter makes the whole line printable (shared/text.py's rule for
CLI output), so a model-written path or a tool's exception text in a record, its traceback
included, cannot act on the terminal or on whoever reads the worker's log file.

Installed only where nothing else handles the root logger: a program that embeds teamctl (the
Python API), or a test runner, keeps its own logging."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from teamctl.shared.text import printable

CLI_FORMAT = "teamctl: %(message)s"
"""The CLI's log lines look like its other stderr lines."""
WORKER_FORMAT = "%(asctime)s %(message)s"
WORKER_DATE_FORMAT = "%H:%M:%S"
"""A worker's log lines look like RQ's own (its defaults), which now go through the same
handler."""
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")
"""litellm's loggers, which bring a stderr handler of their own (and still propagate)."""


class PrintableFormatter(logging.Formatter):
    """A Formatter whose output, message, arguments and traceback alike, passes `printable`:
    escape sequences dropped, other control characters (a bell, a carriage return) spaces."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to sys.stderr as it is when a record comes (a redirected or replaced one
    included), as Python's last-resort handler did."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler's would fix the stream now

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _stream: TextIO) -> None:
        """Ignored (setStream): the stream is always the current sys.stderr."""


def log_to_stderr(fmt: str, datefmt: str | None = None) -> None:
    """Handle every log record of this process with one StderrHandler and PrintableFormatter,
    at the root logger's level (WARNING unless set), unless the root logger has a handler
    already (this one, or the embedding program's)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = StderrHandler()
    handler.setFormatter(PrintableFormatter(fmt, datefmt))
    root.addHandler(handler)


def adopt_loggers(names: tuple[str, ...]) -> None:
    """Once this process logs through StderrHandler, take the stream handlers off the loggers
    `names` (a library's that brings its own): their records then reach StderrHandler alone,
    printable and once, instead of raw and again."""
    if not any(isinstance(h, StderrHandler) for h in logging.getLogger().handlers):
        return  # the embedding program's logging: its business
    for name in names:
        logger = logging.getLogger(name)
        for handler in [h for h in logger.handlers if isinstance(h, logging.StreamHandler)]:
            logger.removeHandler(handler)
        logger.propagate = True
