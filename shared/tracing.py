"""Traces of a run or a turn across processes: one Tracing per process, built from its Settings,
and the spans it starts, passed explicitly to what makes child spans.

Off (no OTEL endpoint, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none) a process gets
NO_TRACING, whose spans do nothing and which never imports opentelemetry; on, it gets the
OpenTelemetry SDK's (shared/tracing_otel.py), with a TracerProvider of its own (no global one).
Context crosses processes as W3C `traceparent` strings: in an RQ job's meta, in a run's state
hash, on bus entries.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Protocol

from teamctl.shared.errors import ConfigError
from teamctl.shared.settings import Settings

AttributeValue = str | int | float | bool
Attributes = Mapping[str, AttributeValue | None]
"""Span attributes; a None value is left out."""
FLUSH_TIMEOUT_MS = 5_000
"""What a process gives its spans' export at its end (a forked job's os._exit). The SDK's batch
processor (1.45) waits for the exporter regardless, so the bound that holds is the export's own
timeout (OTEL_EXPORTER_OTLP_TIMEOUT, 2 s unless set) per batch."""
EXPORT_TIMEOUT_S = 2.0
"""How long one export may take, its retries included, unless OTEL_EXPORTER_OTLP_TIMEOUT says:
each job flushes its spans before it ends, so a collector that is down costs each job this
(the SDK's own default, 10 s, would be paid by every task)."""
TRACEPARENT_META = "traceparent"
"""The key of an RQ job's meta holding the span its work belongs under."""
WORKER_SERVICE = "teamctl-worker"
COORDINATOR_SERVICE = "teamctl-coordinator"
CLI_SERVICE = "teamctl-cli"
"""The services spans name when OTEL_SERVICE_NAME does not."""
OTEL_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
"""What the `otel` extra installs, found without importing it."""
MISSING_EXTRA = (
    "{var} asks for traces but OpenTelemetry is not installed: pip install "
    "'teamctl[otel]' or unset {var}"
)


class Span(Protocol):
    """One span; `traceparent` names it to another process (None when it records nothing)."""

    @property
    def traceparent(self) -> str | None: ...

    def child(
        self, name: str, attributes: Attributes | None = None, links: Iterable[str | None] = ()
    ) -> Span:
        """A span under this one, started now; `links` are traceparents it is linked to."""
        ...

    def set(self, attributes: Attributes) -> None:
        """Add attributes (None values are skipped)."""
        ...

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Something that happened during the span (a reclaim, a refused write, a stop)."""
        ...

    def link(self, traceparent: str | None, attributes: Attributes | None = None) -> None:
        """Link to another span (a message's sender): related, not a parent."""
        ...

    def fail(self, error_type: str) -> None:
        """Mark the span failed (status ERROR, `error.type`) for work that ended badly without
        raising: a failed task, a turn that ended on an error."""
        ...

    def end(self, error: BaseException | None = None) -> None:
        """End the span, as failed when `error` is given (its type is recorded, not its text)."""
        ...

    def __enter__(self) -> Span: ...

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Tracing(Protocol):
    """Starts the root spans of one process and exports them."""

    @property
    def on(self) -> bool: ...

    def start(
        self,
        name: str,
        *,
        parent: str | None = None,
        attributes: Attributes | None = None,
        links: Iterable[str | None] = (),
    ) -> Span:
        """A span under `parent` (a traceparent; None: a new trace)."""
        ...

    def close(self, timeout_ms: int = FLUSH_TIMEOUT_MS) -> None:
        """Export what is left, within `timeout_ms`, and stop (a process or job ends)."""
        ...


class NoSpan:
    """The span of tracing that is off: records nothing, costs a method call."""

    traceparent: str | None = None

    def child(
        self, name: str, attributes: Attributes | None = None, links: Iterable[str | None] = ()
    ) -> NoSpan:
        return self

    def set(self, attributes: Attributes) -> None:
        """Nothing to record."""

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """Nothing to record."""

    def link(self, traceparent: str | None, attributes: Attributes | None = None) -> None:
        """Nothing to record."""

    def fail(self, error_type: str) -> None:
        """Nothing to record."""

    def end(self, error: BaseException | None = None) -> None:
        """Nothing to export."""

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Nothing to end."""


class NoTracing:
    """Tracing that is off: every span is NO_SPAN."""

    on = False

    def start(
        self,
        name: str,
        *,
        parent: str | None = None,
        attributes: Attributes | None = None,
        links: Iterable[str | None] = (),
    ) -> NoSpan:
        return NO_SPAN

    def close(self, timeout_ms: int = FLUSH_TIMEOUT_MS) -> None:
        """Nothing to export."""


NO_SPAN = NoSpan()
"""The one span of tracing that is off (it has no state)."""
NO_TRACING = NoTracing()
"""Tracing that is off (it has no state)."""


def check_tracing(settings: Settings) -> None:
    """ConfigError (exit 2) when the OTEL variables ask for traces this install cannot send;
    nothing is imported (a command checks before it writes anything)."""
    if not settings.traces_wanted:
        return
    _check_exporter(settings)
    try:
        found = all(importlib.util.find_spec(name) for name in OTEL_MODULES)
    except ModuleNotFoundError:  # a parent package is missing
        found = False
    if not found:
        raise _missing_extra(settings)


def tracing_from_settings(settings: Settings, service_name: str) -> Tracing:
    """This process's Tracing: NO_TRACING unless the OTEL variables ask for traces; then the
    SDK's, named `service_name` unless OTEL_SERVICE_NAME names it. ConfigError (exit 2) when
    they ask but the `otel` extra is missing, or ask for an exporter teamctl has not."""
    if not settings.traces_wanted:
        return NO_TRACING
    _check_exporter(settings)
    try:
        from teamctl.shared.tracing_otel import OtelTracing
    except ImportError as exc:
        raise _missing_extra(settings) from exc
    return OtelTracing(
        settings.otel_service_name or service_name,
        export_timeout_s=None if settings.otlp_timeout else EXPORT_TIMEOUT_S,
    )


def _check_exporter(settings: Settings) -> None:
    exporter = (settings.otel_traces_exporter or "otlp").strip().lower()
    if exporter != "otlp":
        raise ConfigError(
            f"OTEL_TRACES_EXPORTER={exporter!r}: teamctl exports traces over "
            "OTLP/HTTP only; set it to otlp or none"
        )


def _missing_extra(settings: Settings) -> ConfigError:
    var = (
        "OTEL_EXPORTER_OTLP_ENDPOINT"
        if settings.otlp_endpoint
        else "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    return ConfigError(MISSING_EXTRA.format(var=var))
