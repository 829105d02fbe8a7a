"""A loopback OTLP/HTTP trace receiver for tests: what the exporters sent, decoded.

`OtlpReceiver` is `tests.support.receivers.Receiver` on 127.0.0.1 (the path
`/v1/traces`, protobuf bodies, as the OpenTelemetry SDK's OTLP/HTTP exporter
sends them), decoding each `ExportTraceServiceRequest` with
`opentelemetry-proto` into `ReceivedSpan`s: a Collector or Jaeger binary
cannot be installed here, and the exporter's own wire format is the contract.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support.receivers import Receiver

__all__ = ["OtlpReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    service: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    attributes: dict[str, Any]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None


class OtlpReceiver(Receiver):
    def spans(self) -> list[ReceivedSpan]:
        """Every span received so far, in the order they arrived."""
        found: list[ReceivedSpan] = []
        for received in list(self.requests):
            assert received.path == "/v1/traces", received.path
            assert received.headers.get("content-type") == "application/x-protobuf", received.headers
            request = ExportTraceServiceRequest.FromString(received.body)
            for resource_spans in request.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(
                            ReceivedSpan(
                                span.name,
                                str(resource.get("service.name", "")),
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                {a.key: _value(a.value) for a in span.attributes},
                            )
                        )
        return found

    def wait_for_spans(
        self, enough: Callable[[list[ReceivedSpan]], bool], timeout_s: float = 30.0
    ) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if enough(spans):
                return spans
            assert time.monotonic() < deadline, f"spans received: {[(s.service, s.name) for s in spans]}"
            time.sleep(0.1)
