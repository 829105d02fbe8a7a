"""The replica's traces: its handler's span, and the trace context its handle calls carry.

Owns the replica's spans, exported over OTLP/HTTP by the OpenTelemetry
SDK's batch span processor (its own thread, never the request path). A
replica never starts a trace: it follows its caller's W3C trace context
(`traceparent` and `tracestate` in the request's headers, as the proxy
sent them; or the context a handle call carries) and records only what a
sampled parent asks for. Its spans: `replica.request` around the handler
of an HTTP request, `replica.call` around a handle call's handler, and
`handle.call` around each call user code makes through a handle (its
context goes along with the call, so the callee's span is its child).
Every span carries `gitops.commit` (the commit the replica's backend was
applied from), `gitops.backend`, `gitops.replica` and, when the caller
said it in `baggage`, `gitops.endpoint`.

The handler runs with its span current, so handle calls made from it
(`replica.handles`, even from a sync handler's thread) are its children.
`replica.host` holds no `ReplicaTracing` when tracing is off.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Awaitable, Callable, Iterator, TypeVar

from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context, attach, detach, get_current
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from telemetry.otlp import HEADERS, batch_processor, says_sampled
from vocabulary.request_path.wire import WireRequest

__all__ = ["ReplicaTracing", "Carrier"]

# A trace context as a handle call carries it: W3C header names to values.
Carrier = dict[str, str]
T = TypeVar("T")

_CONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()


class ReplicaTracing:
    """One replica's tracer, with what every span of it says."""

    def __init__(self, provider: TracerProvider, backend: str, replica_id: str, commit: str | None) -> None:
        """`provider`: where spans go (`exporting` builds the OTLP one; tests keep them in memory)."""
        self._provider = provider
        self._tracer = provider.get_tracer("ray-gitops.replica")
        self._attributes = {"gitops.commit": commit or "", "gitops.backend": backend, "gitops.replica": replica_id}

    @staticmethod
    def provider(otlp_endpoint: str | None = None) -> TracerProvider:
        """A provider that records only what a sampled parent asks for; with
        `otlp_endpoint` (`http://HOST:4318`), exporting there in batches."""
        provider = TracerProvider(
            resource=Resource.create({"service.name": "gitops-replica"}), sampler=ParentBased(ALWAYS_OFF)
        )
        if otlp_endpoint is not None:
            provider.add_span_processor(batch_processor(otlp_endpoint))
        return provider

    async def serve(self, wire: WireRequest, serve: Callable[[], Awaitable[T]]) -> T:
        """`serve()` under a `replica.request` span when the request's trace context says sampled."""
        if not says_sampled(wire[3]):  # most requests: a scan of the header names, not the propagators' read
            return await serve()
        parent = _BAGGAGE.extract(wire[3], _CONTEXT.extract(wire[3], getter=HEADERS), getter=HEADERS)
        if not _sampled(parent):
            return await serve()
        with self._span("replica.request", parent, SpanKind.SERVER) as span:
            reply = await serve()
            status = reply[0] if isinstance(reply, tuple) else getattr(reply, "status", None)
            if isinstance(status, int):
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
            return reply

    async def called(self, carried: Carrier | None, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` (a handle call's handler) under a `replica.call` span when `carried` says sampled."""
        if not carried:  # an untraced caller carries nothing (`handle_call`): no propagator to run
            return await call()
        parent = _BAGGAGE.extract(carried, _CONTEXT.extract(carried))
        if not _sampled(parent):
            return await call()
        with self._span("replica.call", parent, SpanKind.SERVER):
            return await call()

    @contextmanager
    def handle_call(self, target: str, backend: str, replica_id: str) -> Iterator[Carrier | None]:
        """A `handle.call` span for one call through a handle (when the current
        span is sampled), and the context the call carries; None when untraced."""
        parent = get_current()
        if not _sampled(parent):
            yield None
            return
        with self._span("handle.call", parent, SpanKind.CLIENT) as span:
            span.set_attribute("gitops.handle.target", target)
            span.set_attribute("gitops.handle.backend", backend)
            span.set_attribute("gitops.handle.replica", replica_id)
            context = trace.set_span_in_context(span)  # with the baggage it came with (the endpoint)
            carrier: Carrier = {}
            _CONTEXT.inject(carrier, context)
            _BAGGAGE.inject(carrier, context)
            yield carrier

    def shutdown(self) -> None:
        """Send what is queued (a draining replica's last spans)."""
        self._provider.shutdown()

    @contextmanager
    def _span(self, name: str, parent: Context, kind: SpanKind) -> Iterator[Span]:
        attributes: dict[str, Any] = dict(self._attributes)
        endpoint = baggage.get_baggage("gitops.endpoint", parent)
        if isinstance(endpoint, str):
            attributes["gitops.endpoint"] = endpoint
        token = attach(parent)  # the parent's baggage (the endpoint) stays current for handle calls
        try:
            with self._tracer.start_as_current_span(name, parent, kind, attributes) as span:
                yield span
        finally:
            detach(token)


def _sampled(context: Context) -> bool:
    return trace.get_current_span(context).get_span_context().trace_flags.sampled
