"""An OTLP/HTTP trace receiver for tests: a loopback HTTP server that decodes each POST to
/v1/traces (protobuf ExportTraceServiceRequest) into plain spans a test can assert on."""

from __future__ import annotations

import gzip
import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.support.waiting import wait_until


@dataclass(frozen=True)
class Event:
    name: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class Link:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, ids as hex, with its resource's attributes."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    status_code: int = 0

    def event_names(self) -> list[str]:
        return [event.name for event in self.events]


@dataclass
class OtlpReceiver:
    """What the server received; `endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT is set to."""

    endpoint: str = ""
    spans: list[ReceivedSpan] = field(default_factory=list)
    posts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received = [
            span for resource_spans in request.resource_spans for span in _spans(resource_spans)
        ]
        with self.lock:
            self.posts += 1
            self.spans.extend(received)

    def snapshot(self) -> list[ReceivedSpan]:
        with self.lock:
            return list(self.spans)

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [span for span in self.snapshot() if span.name.startswith(prefix)]

    def wait_for(
        self,
        prefix: str,
        count: int = 1,
        timeout_s: float = 30,
        where: Callable[[ReceivedSpan], bool] = lambda span: True,
    ) -> list[ReceivedSpan]:
        """At least `count` spans whose names start with `prefix` and that match `where`,
        waiting for their export (the receiver also holds earlier tests' spans: filter in
        `where`, not after the wait, or an earlier test's span ends the wait)."""

        def found() -> list[ReceivedSpan]:
            return [span for span in self.named(prefix) if where(span)]

        wait_until(
            lambda: len(found()) >= count,
            timeout_s,
            message=f"{count} exported span(s) named {prefix}*",
        )
        return found()

    def clear(self) -> None:
        with self.lock:
            self.spans.clear()


def _spans(resource_spans: Any) -> Iterator[ReceivedSpan]:
    resource = _attributes(resource_spans.resource.attributes)
    for scope_spans in resource_spans.scope_spans:
        for span in scope_spans.spans:
            yield ReceivedSpan(
                name=span.name,
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_id=span.parent_span_id.hex(),
                attributes=_attributes(span.attributes),
                resource=resource,
                events=[Event(e.name, _attributes(e.attributes)) for e in span.events],
                links=[
                    Link(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))
                    for link in span.links
                ],
                status_code=span.status.code,
            )


def _attributes(pairs: list[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver on a free loopback port, serving from a thread, shut down after."""
    receiver = OtlpReceiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            receiver.add(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            """Quiet."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.endpoint = f"http://127.0.0.1:{server.server_port}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
