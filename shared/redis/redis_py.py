"""redis-py, imported as if OpenTelemetry were not installed: whenever the `otel` extra is there,
redis-py loads the OpenTelemetry metrics SDK at import (~40 ms of every command's start) for
metrics teamctl never asks of it. teamctl's own traces import the SDK themselves when tracing is
on (shared/tracing.py), whatever redis-py found."""

from __future__ import annotations

import importlib
import sys

OPENTELEMETRY = "opentelemetry"
"""The package redis-py's observability imports in `try` blocks (its API and SDK metrics)."""


def import_redis_py() -> None:
    """Import redis-py with OpenTelemetry hidden for as long as that takes: a None entry in
    sys.modules makes its imports raise ImportError, as when the package is absent, and the
    entry goes right after, so a later import finds OpenTelemetry as usual. A process that
    imported either already keeps what it has."""
    if "redis" in sys.modules or OPENTELEMETRY in sys.modules:
        return
    sys.modules[OPENTELEMETRY] = None  # type: ignore[assignment]
    try:
        importlib.import_module("redis")
    finally:
        if sys.modules.get(OPENTELEMETRY, "") is None:
            del sys.modules[OPENTELEMETRY]


import_redis_py()
