"""The capture stage: sampled request/response records (`proxy.observability.capture`).

On for an endpoint with `[capture]` when the proxy has a capture writer.
Draws the record once the request is formed, counts a streamed answer's
chunks (keeping the first bytes) as they are relayed, and hands the record to
the writer once the answer went out and its shadow copies, if any, answered
too (`done`, which the shadow stage calls as each copy answers).
`GrpcCapture` is the same stage for the gRPC port's calls (`proxy.grpc_ingress`):
a `grpc` record, whose streamed reply the ingress counts message by message
(its `Flow`), not chunk by chunk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from proxy.observability.redacting import Exchange, Flow
from proxy.observability.bodies import EMPTY, BodyView
from proxy.pipeline.stage import Headers, Stage
from proxy.pipeline.transit import CLIENT_LEFT, Transit
from proxy.routes.snapshot import ServedEndpoint

if TYPE_CHECKING:  # handed in by the app: the writer's thread and files are its own
    from proxy.observability.capture import CaptureWriter

__all__ = ["Capture", "GrpcCapture"]


class Capture(Stage):
    """Each sampled request's record: drawn, filled in with its answer, offered to the writer."""

    def __init__(self, writer: CaptureWriter) -> None:
        self._writer = writer

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("formed", "streaming", "answered") if served.capture is not None else ()

    def formed(self, transit: Transit) -> None:
        served, request = transit.served, transit.request
        assert served.capture is not None and request is not None
        transit.captured = self._writer.draw(served.capture, served.name, transit.backend, request, served.rollout_step)

    def streaming(self, transit: Transit) -> None:
        captured, held = transit.captured, transit.held
        if captured is None or held is None:
            return
        captured.kind, captured.stream = "stream", Flow(captured.redaction.max_body_bytes)
        captured.stream.add(held.start.first_chunk)
        transit.observe(captured.stream.add)

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        captured = transit.captured
        if captured is None or (transit.held is not None and status == CLIENT_LEFT):
            return
        captured.status, captured.response_headers, captured.response_body = status, headers, payload
        captured.latency_s, captured.commit = transit.duration_s, transit.commit()
        if transit.traced is not None:
            captured.trace_id = f"{transit.traced.span.get_span_context().trace_id:032x}"
        captured.answered = True
        self.done(captured)

    def done(self, captured: Exchange) -> None:
        """Offer the record once the primary answered and no shadow copy is still out (exactly once)."""
        if captured.answered and captured.shadows_out == 0:
            self._writer.offer(captured)

    def for_grpc(self) -> GrpcCapture:
        """This capture for gRPC calls (`proxy.grpc_ingress`'s stages): the same writer."""
        return GrpcCapture(self._writer)


class GrpcCapture(Capture):
    """Capture of a gRPC call: its record says `grpc`; the ingress counts a streamed reply's messages
    (`Exchange.stream`) and gives `answered` the call's trailers (`grpc-status` among them)."""

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("formed", "answered") if served.capture is not None else ()

    def formed(self, transit: Transit) -> None:
        super().formed(transit)
        if transit.captured is not None:
            transit.captured.kind = "grpc"

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        captured = transit.captured
        if captured is not None and captured.stream is not None:
            payload = EMPTY  # a streamed reply: its messages are in its flow, not one body
        super().answered(transit, status, headers, payload)
