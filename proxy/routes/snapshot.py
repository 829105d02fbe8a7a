"""The proxy's serving snapshot: one immutable object a request reads once.

`Snapshot` bundles the route index (and the gRPC services' endpoints: the v2
service's by the model its calls name, too), each endpoint's traffic/shadow/timeout/body limit
and the replica pool of every backend in use. The long-poll side builds a new
snapshot from the controller's payloads and swaps it in with one assignment,
so a request sees either the old or the new table, never a mix. Pools are
shared between snapshots (they carry in-flight counts) and are not part of
the table's identity.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from vocabulary.control.longpoll import RouteTable
from vocabulary.spec.endpoints import CaptureConfig, DEFAULT_MAX_BODY_BYTES, EndpointConfig, ShadowCompare
from vocabulary.spec.traffic_policy import CircuitConfig, OutliersConfig
from vocabulary.request_path.choosing import Random, ShadowSampler, WeightedChoice
from vocabulary.request_path.v2_calls import V2_SERVICE, model_of_route
from proxy.routes.rate_limits import TenantLimit
from proxy.pool.replicas import ReplicaPool
from proxy.pool.retrying import DEFAULT_POLICY, RetryPolicy
from proxy.routes.routing import Route, RouteIndex
from proxy.routes.token_budgets import TokenBudget
from proxy.routes.steering import Headers, Steering

__all__ = ["ServedEndpoint", "Snapshot", "build_snapshot"]


@dataclass(frozen=True)
class ServedEndpoint:
    name: str
    traffic: WeightedChoice
    shadow: ShadowSampler
    timeout_s: float
    steering: Steering = Steering()
    compare: ShadowCompare = ShadowCompare.NONE
    ignore: frozenset[str] = frozenset()
    shadow_query: bool = False  # shadows get the query string (else the path alone)
    shadow_values: bool = False  # mismatches show values (else JSON paths and types)
    limits: TenantLimit | None = None  # requests per tenant (else unlimited)
    trace_sample: float = 0.0  # share of requests without a sampled traceparent that are traced
    capture: CaptureConfig | None = None  # sampled request/response records (proxy.observability.capture)
    rollout_step: int = 0  # the progressive rollout's 1-based step these weights are (0: none runs)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # a larger request body is 413
    retries: RetryPolicy = DEFAULT_POLICY  # which failed tries are sent again (proxy.pool.retrying)
    token_budget: TokenBudget | None = None  # LLM tokens per tenant (else not counted)
    outliers: OutliersConfig | None = None  # when a replica is ejected (proxy.pool.outliers); None: never
    circuit: CircuitConfig | None = None  # requests waiting and retries in flight (proxy.pool.circuit); None: unbounded
    grpc_service: str | None = None  # the gRPC service it serves on the gRPC port (proxy.grpc_ingress); None: none
    # that service's methods whose requests stream: its grpc_streaming and its servicer's (EndpointConfig.streaming_requests)
    grpc_streaming: frozenset[str] = frozenset()

    @classmethod
    def from_config(cls, config: EndpointConfig, nodes: int = 1) -> ServedEndpoint:
        """`nodes`: the nodes running proxies, which share `[limits]` (`RouteTable.nodes`): its request
        rate (`limits`) and its token budget (`token_budget`)."""
        return cls(
            config.name,
            WeightedChoice.from_weights(config.traffic),
            ShadowSampler.from_shares(config.shadow),
            config.timeout_s,
            Steering.from_config(config),
            config.shadow_compare,
            frozenset(config.shadow_ignore),
            config.shadow_query,
            config.shadow_values,
            TenantLimit.from_config(config.name, config.limits, nodes),
            config.tracing.sample if config.tracing is not None else 0.0,
            config.capture,
            config.rollout_step,
            config.max_body_bytes,
            RetryPolicy.from_config(config.retries),
            TokenBudget.from_config(config.name, config.limits, nodes),
            config.outliers,
            config.circuit,
            config.grpc_service,
            config.streaming_requests(),
        )

    def pick(self, headers: Headers, rng: Random, body: bytes | None = None) -> str:
        """The backend for a request: a matching header (or, with the body, JSON)
        rule, else the weights, drawn at the request's sticky point if it has
        one, else at random."""
        steering = self.steering
        if steering.steers:
            matched = steering.matched(headers, body)
            if matched is not None:
                return matched
            point = steering.point(headers)
            if point is not None:
                return self.traffic.pick(point) or ""
        return self.traffic.pick(rng.random()) or ""


@dataclass(frozen=True)
class Snapshot:
    routes: RouteIndex = field(default_factory=RouteIndex)
    endpoints: Mapping[str, ServedEndpoint] = field(default_factory=dict)
    pools: Mapping[str, ReplicaPool] = field(default_factory=dict)
    # GET /-/routes, rendered once per snapshot.
    routes_json: bytes = b"{}"
    # Every route of the table has its endpoint's config and replicas: a
    # proxy starting up serves from the first complete snapshot on.
    complete: bool = True
    # gRPC service (`package.Service`) -> the endpoint serving it, for the gRPC port (proxy.grpc_ingress).
    grpc_services: Mapping[str, str] = field(default_factory=dict)
    # The v2 service's model endpoints (`vocabulary.request_path.v2_calls`): model name -> endpoint.
    grpc_models: Mapping[str, str] = field(default_factory=dict)

    def backend_load(self) -> dict[str, dict[str, float]]:
        """Per backend: requests in flight on replicas, waiting in the queue,
        and turned away in the last second because it had no replica; the
        sum of its replicas' reported loads, once one has reported; and for a
        multiplexed backend its hottest model's in-flight load (`hot`)."""
        loads: dict[str, dict[str, float]] = {}
        for name, pool in self.pools.items():
            load: dict[str, float] = {"ongoing": pool.ongoing(), "queued": pool.queued(), "unserved": pool.unserved()}
            if pool.by_model():
                load["hot"] = pool.scaling_ongoing()  # what the autoscaler is told (proxy.pool.multiplexing)
            if pool.outliers.any():
                load["ejected"] = len(pool.ejected())
            reported = pool.reported()
            if reported is not None:
                load["reported"] = reported
            loads[name] = load
        return loads

    def stalled_replicas(self) -> dict[str, dict[str, str]]:
        """Per backend, the replicas found stalled that the controller still lists (id -> what was seen)."""
        return {name: hung for name, pool in self.pools.items() if (hung := pool.stalled())}

    def ejected_replicas(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per backend, the replicas ejected now (`proxy.pool.outliers`), the worn out ones included,
        as the controller is told (`ReplicaPool.ejected`)."""
        return {name: out for name, pool in self.pools.items() if (out := pool.ejected())}


def build_snapshot(
    table: RouteTable,
    endpoints: Mapping[str, EndpointConfig],
    pools: Mapping[str, ReplicaPool],
) -> Snapshot:
    """A snapshot serving only endpoints whose config has arrived.

    A route whose endpoint config is still unknown is left out (404) rather
    than half-served.
    """
    entries = [entry for entry in table.entries if entry.endpoint in endpoints]
    plans = {entry.endpoint: ServedEndpoint.from_config(endpoints[entry.endpoint], table.nodes) for entry in entries}
    routes = RouteIndex.build(Route.build(e.route, e.methods, e.endpoint) for e in entries)
    listing = {e.route: {"endpoint": e.endpoint, "methods": list(e.methods)} for e in entries}
    complete = len(entries) == len(table.entries)
    services: dict[str, str] = {}
    models: dict[str, str] = {}
    for entry in entries:
        service = plans[entry.endpoint].grpc_service
        model = model_of_route(entry.route) if service == V2_SERVICE else None
        if model is not None:
            models.setdefault(model, entry.endpoint)
        elif service is not None:
            services[service] = entry.endpoint
    if models and V2_SERVICE not in services:  # the server methods' calls: the first model's endpoint
        services[V2_SERVICE] = models[min(models)]
    return Snapshot(
        routes, plans, dict(pools), json.dumps(listing, sort_keys=True).encode(), complete, services, models,
    )
