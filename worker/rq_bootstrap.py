"""What one setting, `RQ_CONFIG=teamctl.worker.settings`, adds to an `rq worker` before its preload:
teamctl's worker and connection classes, and the Redis teamctl itself would use.

RQ builds its worker and connection classes from its command line (`-w`, `--connection-class`
or RQ_WORKER_CLASS, RQ_CONNECTION_CLASS) before it imports the settings module, so a worker
started with RQ_CONFIG alone would get RQ's stock client, which quits at the first refused
connection of a Redis restart. The settings module therefore starts the same command again
(same pid, same arguments) with those two variables set, unless the person chose the classes;
that costs one interpreter start (~0.2 s) and only when they were not set.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from teamctl.shared.redis.connection import WORKER_CLASS, WORKER_CONNECTION_CLASS
from teamctl.shared.settings import Settings

CLASS_VARIABLES = {"connection_class": "RQ_CONNECTION_CLASS", "worker_class": "RQ_WORKER_CLASS"}
"""RQ's command-line parameters for the two classes, and the variables that set them."""


def rq_command() -> Any | None:
    """The click context of the `rq` command importing this module (None outside one)."""
    if "click" not in sys.modules:  # not under a click command: nothing to complete
        return None
    import click

    context = click.get_current_context(silent=True)
    if context is None or "connection_class" not in context.params:
        return None
    return context


def missing_classes(context: Any) -> dict[str, str]:
    """The class variables to set: those the person left to RQ's defaults (an explicit
    `-w` or `--connection-class` is theirs to keep)."""
    from click.core import ParameterSource

    ours = {"connection_class": WORKER_CONNECTION_CLASS, "worker_class": WORKER_CLASS}
    wanted = ["connection_class"] + (["worker_class"] if context.info_name == "worker" else [])
    return {
        CLASS_VARIABLES[name]: ours[name]
        for name in wanted
        if context.get_parameter_source(name) is ParameterSource.DEFAULT
    }


def complete_rq_command(environ: Mapping[str, str]) -> None:
    """Start this `rq` command again with teamctl's classes when it lacks them; returns only
    when nothing is missing (or this is not an `rq` command)."""
    context = rq_command()
    if context is None:
        return
    missing = missing_classes(context)
    if not missing:
        return
    argv = [sys.executable, *sys.orig_argv[1:]]
    os.execve(sys.executable, argv, {**environ, **missing})


def rq_redis_url(settings: Settings) -> str | None:
    """The Redis an `rq` command with this settings module uses when given no `-u` and no
    RQ_REDIS_URL: REDIS_URL, else the embedded server of this user and state dir (started if
    needed, as `teamctl run` would)."""
    if settings.redis_url:
        return settings.redis_url
    context = rq_command()
    if context is None or context.params.get("url"):
        return None  # RQ uses -u (or RQ_REDIS_URL) and never reads this setting
    from teamctl.shared.redis.embedded import EmbeddedRedis

    return EmbeddedRedis(settings.state_dir / "redis").ensure()
