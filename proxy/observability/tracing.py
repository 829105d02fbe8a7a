"""The proxy's traces: one span per traced request, exported over OTLP/HTTP.

Owns the head-sampling decision and the proxy request span. A request whose
W3C `traceparent` says sampled is always traced as that trace's child; any
other request is traced with its endpoint's `[tracing] sample` share (a new
trace). A traced request's `traceparent` and `tracestate` are replaced, on
their way to the replica, by the proxy span's (W3C trace context; the
endpoint travels in `baggage` as `gitops.endpoint`), so the replica's span
and its handle calls join the trace; an untraced request's headers pass as
they came. The span (`proxy.request`) carries the endpoint, the backend, the
replica, the commit its replica set runs, the progressive rollout's step
whose weights chose the backend (`gitops.rollout_step`, 0 when none runs),
the status and the bytes of the answer; a stream's span ends when the
stream does.

Exported by the OpenTelemetry SDK's batch span processor on its own thread:
never on the request path. `proxy.app` holds no `RequestTracing` when
tracing is off, and then spends one branch per request on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Setter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from telemetry.otlp import HEADERS, SpansSent, batch_processor, says_sampled
from vocabulary.request_path.choosing import Random

__all__ = ["RequestTracing", "Traced", "SpansSent", "exporting_tracer", "TRACE_HEADERS"]

Headers = list[tuple[bytes, bytes]]

# What the proxy replaces in a traced request's headers (W3C trace context and baggage).
TRACE_HEADERS = frozenset({b"traceparent", b"tracestate", b"baggage"})


class _DictSetter(Setter[dict[str, str]]):
    def set(self, carrier: dict[str, str], key: str, value: str) -> None:
        carrier[key] = value


_SET = _DictSetter()
_CONTEXT = TraceContextTextMapPropagator()
_BAGGAGE = W3CBaggagePropagator()


def exporting_tracer(otlp_endpoint: str, service: str, sent: SpansSent | None = None) -> trace.Tracer:
    """A tracer whose spans go to `otlp_endpoint` (`http://HOST:4318`) in batches,
    sampling every span it is asked for (the caller decides what to trace);
    `sent` counts what each export sent or lost."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(batch_processor(otlp_endpoint, sent))
    return provider.get_tracer("ray-gitops.proxy")


@dataclass
class Traced:
    """One traced request: its span, and what it learns on the way."""

    span: Span
    context: Context
    replica: str = ""
    _ended: bool = field(default=False, repr=False)

    def carry(self, headers: Headers) -> Headers:
        """`headers` for the replica: the proxy span's trace context instead of the client's, first
        (a gRPC call's marker stays the last header, `vocabulary.request_path.grpc_calls`)."""
        carrier: dict[str, str] = {}
        _CONTEXT.inject(carrier, self.context, _SET)
        _BAGGAGE.inject(carrier, self.context, _SET)
        kept = [(name, value) for name, value in headers if name not in TRACE_HEADERS]
        return [*((name.encode(), value.encode("latin-1")) for name, value in carrier.items()), *kept]

    def end(self, status: int, sent_bytes: int, commit: str | None) -> None:
        if self._ended:
            return
        self._ended = True
        span = self.span
        span.set_attribute("http.response.status_code", status)
        span.set_attribute("http.response.body.size", sent_bytes)
        span.set_attribute("gitops.commit", commit or "")
        if self.replica:
            span.set_attribute("gitops.replica", self.replica)
        if status >= 500:
            span.set_status(Status(StatusCode.ERROR))
        span.end()


class RequestTracing:
    """The proxy's tracer and its sampling draws."""

    def __init__(self, tracer: trace.Tracer, rng: Random) -> None:
        self._tracer = tracer
        self._rng = rng

    def begin(
        self, endpoint: str, backend: str, sample: float, method: str, path: str, headers: Headers,
        name: str = "proxy.request", rollout_step: int = 0,
    ) -> Traced | None:
        """The request's span (`name`: "proxy.websocket" for a session), or None when it is not traced;
        `rollout_step`: the progressive rollout's 1-based step whose weights chose `backend` (0: none)."""
        # The W3C header is parsed only when there is one that says sampled (flags' low bit):
        # most requests carry none, and a draw against `sample` is all they cost.
        sampled = False
        if says_sampled(headers):
            parent = _CONTEXT.extract(headers, getter=HEADERS)
            sampled = trace.get_current_span(parent).get_span_context().trace_flags.sampled
        if not sampled:
            if sample <= 0 or self._rng.random() >= sample:
                return None
            parent = Context()  # a new trace: an unsampled parent is not continued
        parent = _BAGGAGE.extract(headers, parent, getter=HEADERS)
        span = self._tracer.start_span(
            name,
            parent,
            SpanKind.SERVER,
            {
                "gitops.endpoint": endpoint,
                "gitops.backend": backend,
                "gitops.rollout_step": rollout_step,
                "http.request.method": method,
                "url.path": path,
            },
        )
        context = baggage.set_baggage("gitops.endpoint", endpoint, trace.set_span_in_context(span, parent))
        return Traced(span, context)
