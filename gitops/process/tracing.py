"""The agent's apply traces over OTLP/HTTP (`gitops run --otlp-endpoint`).

Owns sending: each applied commit's `gitops.reconcile.apply_traces.SpanRecord`s become
OpenTelemetry spans with their recorded times and parents (one trace per
commit), handed to the SDK's batch span processor, which exports them on
its own thread as OTLP/HTTP protobuf. The agent's loop never waits on it.
"""

from __future__ import annotations

from typing import Sequence

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from gitops.reconcile.apply_traces import SpanRecord
from telemetry.otlp import SpansSent, batch_processor

__all__ = ["OtlpTraceSink"]

_NS = 1_000_000_000


class OtlpTraceSink:
    """Sends each trace it is given to `otlp_endpoint` (`http://HOST:4318`)."""

    def __init__(
        self, otlp_endpoint: str | None = None, processor: SpanProcessor | None = None, sent: SpansSent | None = None
    ) -> None:
        """`processor`: where spans go instead (tests keep them in memory); `sent` counts each export's spans."""
        self._provider = TracerProvider(resource=Resource.create({"service.name": "gitops-agent"}))
        if processor is None:
            assert otlp_endpoint is not None, "an OTLP endpoint or a span processor"
            processor = batch_processor(otlp_endpoint, sent)
        self._provider.add_span_processor(processor)
        self._tracer = self._provider.get_tracer("ray-gitops.agent")

    def record(self, records: Sequence[SpanRecord]) -> None:
        spans: list[Span] = []
        for record in records:
            parent = None if record.parent is None else trace.set_span_in_context(spans[record.parent])
            span = self._tracer.start_span(
                record.name, parent, SpanKind.INTERNAL, dict(record.attributes), start_time=int(record.start_s * _NS)
            )
            if "gitops.error" in record.attributes:
                span.set_status(Status(StatusCode.ERROR))
            spans.append(span)
        for span, record in zip(reversed(spans), reversed(records)):
            span.end(end_time=int(record.end_s * _NS))

    def close(self) -> None:
        """Send what is queued; the agent is stopping."""
        self._provider.shutdown()
