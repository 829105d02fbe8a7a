"""Spans out over OTLP/HTTP, and W3C trace context in from a header list.

Owns the export: `batch_processor` sends a process's spans to
`http://HOST:4318/v1/traces` (OTLP over HTTP/protobuf, the OpenTelemetry
default) from the SDK's batch span processor, on its own thread, never on a
request path; `CountedExporter` tells a counter how many spans each export
sent or lost (the dashboard's export-errors panel). `HEADERS` reads W3C
trace context (`traceparent`, `tracestate`, `baggage`) from a request's
header list as the wire carries it (`[(name, value)]`, bytes);
`says_sampled` is the cheap look before that read: most requests carry no
sampled `traceparent`, and a scan of the names is all they should cost.
Not here: what each process traces and when (`gitops.process.tracing`,
`proxy.observability.tracing`, `replica.tracing`).
"""

from __future__ import annotations

from typing import Callable, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

__all__ = ["EXPORT_DELAY_MS", "SpansSent", "CountedExporter", "batch_processor", "HEADERS", "says_sampled"]

# Spans wait at most this long in the exporter's queue before they are sent.
EXPORT_DELAY_MS = 1000

# Told how many spans an export sent, by result ("exported" or "failed"); on the exporter's thread.
SpansSent = Callable[[str, int], None]

Headers = list[tuple[bytes, bytes]]


class CountedExporter(SpanExporter):
    """An exporter that counts what it sent and what failed (for the export-errors panel)."""

    def __init__(self, inner: SpanExporter, sent: SpansSent) -> None:
        self._inner = inner
        self._sent = sent

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        self._sent("exported" if result is SpanExportResult.SUCCESS else "failed", len(spans))
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def batch_processor(otlp_endpoint: str, sent: SpansSent | None = None) -> BatchSpanProcessor:
    """Spans to `otlp_endpoint` (`http://HOST:4318`) in batches; `sent` counts each export's spans."""
    exporter: SpanExporter = OTLPSpanExporter(endpoint=otlp_endpoint.rstrip("/") + "/v1/traces")
    if sent is not None:
        exporter = CountedExporter(exporter, sent)
    return BatchSpanProcessor(exporter, schedule_delay_millis=EXPORT_DELAY_MS)


class _HeaderGetter(Getter[Headers]):
    def get(self, carrier: Headers, key: str) -> list[str] | None:
        name = key.encode()
        found = [value.decode("latin-1") for header, value in carrier if header == name]
        return found or None

    def keys(self, carrier: Headers) -> list[str]:
        return [header.decode("latin-1") for header, _ in carrier]


HEADERS = _HeaderGetter()


# The last two hex digits of a `traceparent` whose sampled bit is set.
_SAMPLED_FLAGS = frozenset(f"{flags:02x}".encode() for flags in range(1, 256, 2)) | frozenset(
    f"{flags:02X}".encode() for flags in range(1, 256, 2)
)


def says_sampled(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether `headers` carry a `traceparent` whose flags say sampled (its other fields unchecked:
    the propagator's full read decides, for the few that do)."""
    flags = next((value.strip()[-2:] for name, value in headers if name == b"traceparent"), b"")
    return flags in _SAMPLED_FLAGS
