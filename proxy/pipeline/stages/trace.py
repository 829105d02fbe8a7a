"""The tracing stage: the request's span (`proxy.observability.tracing`), from its route to its answer.

On when the proxy traces at all (a request may carry a sampled traceparent
whatever its endpoint's share). Begins the span before the body is read,
names the backend the body chose, carries the span's context to the replica,
and ends the span with the answer's code, size (-1: streamed) and commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from proxy.observability.bodies import BodyView
from proxy.pipeline.stage import Headers, Stage
from proxy.pipeline.transit import CLIENT_LEFT, Transit
from proxy.routes.snapshot import ServedEndpoint

if TYPE_CHECKING:  # handed in by the app: this stage exports nothing itself
    from proxy.observability.tracing import RequestTracing

__all__ = ["Tracing"]


class Tracing(Stage):
    """Each request's span: begun, carried to the replica, ended with its answer."""

    def __init__(self, tracing: RequestTracing) -> None:
        self._tracing = tracing

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("begin", "formed", "answered", "left")

    def begin(self, transit: Transit) -> None:
        served, scope = transit.served, transit.scope
        transit.traced = self._tracing.begin(
            served.name, transit.backend, served.trace_sample, scope["method"], transit.path, scope["headers"],
            rollout_step=served.rollout_step,
        )

    def formed(self, transit: Transit) -> None:
        traced, request = transit.traced, transit.request
        if traced is None or request is None:
            return
        if transit.served.steering.reads_body:
            traced.span.set_attribute("gitops.backend", transit.backend)  # JSON match rules read the body
        method, path, query, headers, body = request
        transit.request = (method, path, query, traced.carry(headers), body)

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        traced = transit.traced
        if traced is None:
            return
        if transit.held is not None:
            traced.span.set_attribute("gitops.stream", True)
            traced.end(status, -1, transit.commit())
        else:
            traced.end(status, len(payload), transit.commit())

    def left(self, transit: Transit) -> None:
        if transit.traced is not None:
            transit.traced.end(CLIENT_LEFT, 0, transit.commit())
