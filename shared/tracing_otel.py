"""The OpenTelemetry SDK behind shared/tracing.py: imported only when tracing is on.

Each process (each forked job too) owns its TracerProvider, exporting over OTLP/HTTP with a
batch processor; `close` flushes it within a bound, since a forked RQ job ends in os._exit and
its processor's thread would otherwise take the last spans with it. The SDK reads the standard
variables itself: the endpoints and headers, OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from types import TracebackType

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanContext, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

INSTRUMENTATION = "teamctl"
AttributeValue = str | int | float | bool
Attributes = Mapping[str, AttributeValue | None]
"""As shared/tracing.py names them: shared/tracing.py imports this module (when tracing is on),
and the layout test keeps imports free of cycles, lazy ones included."""
FLUSH_TIMEOUT_MS = 5_000
"""shared/tracing.py's FLUSH_TIMEOUT_MS, the default of close()."""


class OtelSpan:
    """A recording span of the SDK, behind the Span protocol."""

    def __init__(self, tracer: trace.Tracer, span: trace.Span) -> None:
        self._tracer = tracer
        self._span = span

    @property
    def traceparent(self) -> str | None:
        return traceparent_of(self._span.get_span_context())

    def child(
        self, name: str, attributes: Attributes | None = None, links: Iterable[str | None] = ()
    ) -> OtelSpan:
        return start_span(
            self._tracer, name, trace.set_span_in_context(self._span), attributes, links
        )

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(kept(attributes))

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        self._span.add_event(name, kept(attributes or {}))

    def link(self, traceparent: str | None, attributes: Attributes | None = None) -> None:
        context = span_context(traceparent)
        if context is not None:
            self._span.add_link(context, kept(attributes or {}))

    def fail(self, error_type: str) -> None:
        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, error_type))

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            # The type only: an error's text may quote what a model wrote.
            self.fail(type(error).__name__)
        self._span.end()

    def __enter__(self) -> OtelSpan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.end(error)


class OtelTracing:
    """This process's TracerProvider, resource and exporter."""

    on = True

    def __init__(self, service_name: str, export_timeout_s: float | None = None) -> None:
        resource = Resource.create(
            {
                "service.name": service_name,
                "host.name": socket.gethostname(),
                "process.pid": os.getpid(),
            }
        )
        self._provider = TracerProvider(resource=resource)  # sampler: OTEL_TRACES_SAMPLER
        # The batch processor's flush blocks until its export ends, retries included: the
        # export's timeout is what bounds a job's end when the collector does not answer.
        exporter = OTLPSpanExporter(timeout=export_timeout_s)
        self._provider.add_span_processor(BatchSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer(INSTRUMENTATION)

    def start(
        self,
        name: str,
        *,
        parent: str | None = None,
        attributes: Attributes | None = None,
        links: Iterable[str | None] = (),
    ) -> OtelSpan:
        context = None
        parent_context = span_context(parent)
        if parent_context is not None:
            context = trace.set_span_in_context(trace.NonRecordingSpan(parent_context))
        # An empty Context, not None: None would mean OpenTelemetry's current (global) one.
        return start_span(self._tracer, name, context or Context(), attributes, links)

    def close(self, timeout_ms: int = FLUSH_TIMEOUT_MS) -> None:
        self._provider.force_flush(timeout_ms)
        self._provider.shutdown()


def start_span(
    tracer: trace.Tracer,
    name: str,
    context: Context,
    attributes: Attributes | None,
    links: Iterable[str | None],
) -> OtelSpan:
    """A span started in `context`, linked to the spans `links` name."""
    linked = [Link(c) for c in map(span_context, links) if c is not None]
    span = tracer.start_span(name, context=context, attributes=kept(attributes or {}), links=linked)
    return OtelSpan(tracer, span)


def kept(attributes: Attributes) -> dict[str, AttributeValue]:
    """The attributes with a value."""
    return {name: value for name, value in attributes.items() if value is not None}


def span_context(traceparent: str | None) -> SpanContext | None:
    """The remote span a W3C traceparent names; None for none or a malformed one."""
    if not traceparent:
        return None
    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    found = trace.get_current_span(context).get_span_context()
    return found if found.is_valid else None


def traceparent_of(context: SpanContext) -> str | None:
    """The W3C traceparent naming a span, for a job's meta, a run's hash, a bus entry."""
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
