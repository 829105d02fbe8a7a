"""Tunables of one proxy: HTTP edge bounds, the gRPC port's bounds, body limit, queue bounds, shadow bounds, long-poll backoff.

A frozen value passed into the app and the actor, so tests can shrink every
bound without patching. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from httpedge.limits import EdgeLimits
from vocabulary.spec.endpoints import MAX_BODY_BYTES_CEILING

__all__ = ["GrpcLimits", "ProxySettings"]


@dataclass(frozen=True)
class GrpcLimits:
    """What one client may hold of the gRPC port (`proxy.grpc_ingress`), enforced by grpcio's server."""

    # The largest request or reply message (an endpoint's own `max_body_bytes` applies below it):
    # a larger request is refused with RESOURCE_EXHAUSTED before it is routed.
    max_message_bytes: int = 4 * 1024 * 1024
    # Concurrent calls (HTTP/2 streams) one connection may open; the client waits for more (SETTINGS frame).
    max_concurrent_streams: int = 100
    # The metadata (headers) of one call, in bytes; past it the call is refused.
    max_metadata_bytes: int = 16 * 1024
    # Calls one worker runs at once, every connection together; past it, RESOURCE_EXHAUSTED.
    max_concurrent_calls: int = 4096
    # The HTTP/2 flow-control window of each stream and of each connection: what a client may send
    # before the worker has read it. Fixed: grpcio's bandwidth probes would grow it, and it read
    # that far into an oversized message before refusing it (16 in flight: 40 MB, 4 MB at 1 MiB).
    flow_window_bytes: int = 1024 * 1024


@dataclass(frozen=True)
class ProxySettings:
    # Slow, oversized and excess clients (see httpedge.server): headers above
    # 64 KiB are 431, headers not complete in 10 s or a body not complete in
    # 30 s are 408, connections past 4096 (`gitops run --proxy-max-connections`)
    # are 503 with Retry-After.
    edge: EdgeLimits = EdgeLimits()
    # The gRPC port's bounds (`gitops run --grpc-port`): message size, streams per connection, metadata size,
    # flow-control window.
    grpc: GrpcLimits = GrpcLimits()
    # The most any endpoint's request body may be, whatever its `max_body_bytes`
    # says (the endpoint's own limit applies below it): 413 above.
    max_body_bytes: int = MAX_BODY_BYTES_CEILING
    # Request body bytes one worker holds at once, all requests together (from their first
    # byte until their request ends); a body that would pass it is 503 with Retry-After.
    # Twice the ceiling: a body of the largest size always fits beside others.
    max_bodies_in_flight_bytes: int = 2 * MAX_BODY_BYTES_CEILING
    # Requests waiting for a free replica slot, per backend; past it, 503.
    max_queued_per_backend: int = 1024
    # Seconds a client is told to wait after a 503.
    retry_after_s: int = 1
    # Shadow copies in flight per shadow backend; past it, copies are dropped.
    max_shadow_in_flight: int = 64
    # Fresh Ray calls in flight per replica before further requests are
    # coalesced into one batch call, and how long a call stays fresh (the
    # most a request waits behind a slow one); see proxy.pool.coalescing.
    max_calls_per_replica: int = 1
    coalesce_window_s: float = 0.005
    # Long poll: first and largest pause after the controller is unreachable.
    longpoll_backoff_s: float = 0.2
    longpoll_max_backoff_s: float = 5.0
    # Load reports for autoscaling; the controller forgets them after ~2 s.
    load_report_interval_s: float = 0.5
