"""Endpoints: routes, methods, traffic and shadow policies, as pure logic.

Owns the configured endpoints, the validation that protects them and the
route table the proxies match against. The serving rules (unknown backends,
weights that do not sum to 1, clashing routes, deleting a backend that still
receives traffic) are `vocabulary.spec.serving_rules`'; this module turns their
problems into its messages. Every invalid request raises `ValueError` with a
clear message and changes nothing. No Ray here.
"""

from __future__ import annotations

from typing import Any, Collection

from vocabulary.control.longpoll import RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.serving_rules import (
    backend_in_use, taken_grpc_services, taken_routes, unknown_backends, unknown_match_backends, weight_sum,
)
from vocabulary.control.status import EndpointStatus

__all__ = ["EndpointState", "check_backend_deletable"]


class EndpointState:
    def __init__(self, endpoints: dict[str, EndpointConfig] | None = None) -> None:
        self._endpoints: dict[str, EndpointConfig] = dict(endpoints or {})

    def validate(self, config: EndpointConfig, backends: Collection[str]) -> None:
        where = f"endpoint {config.name!r}"
        if not config.route.startswith("/"):
            raise ValueError(f"{where}: route {config.route!r} must start with '/'")
        if not config.traffic:
            raise ValueError(f"{where}: traffic must name at least one backend")
        for policy, weights in (("traffic", config.traffic), ("shadow", config.shadow)):
            unknown = sorted(p.backend or "" for p in unknown_backends(config.name, policy, weights, backends))
            if unknown:
                raise ValueError(f"{where}: {policy} names unknown backend(s) {', '.join(unknown)}")
            negative = sorted(b for b, w in weights.items() if not 0 <= w <= 1)
            if negative:
                raise ValueError(f"{where}: {policy} weight of {', '.join(negative)} must be in [0, 1]")
        matched = unknown_match_backends(config.name, [rule.backend for rule in config.match], backends)
        if matched:
            raise ValueError(f"{where}: match names unknown backend {matched[0].backend!r}")
        if weight_sum(config.name, config.traffic):
            total = sum(config.traffic.values())
            raise ValueError(f"{where}: traffic weights sum to {total:g}, not 1")
        others = {name: e for name, e in self._endpoints.items() if name != config.name}
        taken = taken_routes({**others, config.name: config})
        if taken:
            raise ValueError(f"{where}: route {config.route} is already used by endpoint {taken[0].other!r}")
        served = taken_grpc_services({**others, config.name: config})
        if served:
            raise ValueError(
                f"{where}: gRPC service {config.grpc_service} is already served by endpoint {served[0].other!r}"
            )

    def apply(self, config: EndpointConfig, backends: Collection[str]) -> bool:
        """Validate and store; False when nothing changed."""
        self.validate(config, backends)
        if self._endpoints.get(config.name) == config:
            return False
        self._endpoints[config.name] = config
        return True

    def delete(self, name: str) -> bool:
        return self._endpoints.pop(name, None) is not None

    def get(self, name: str) -> EndpointConfig | None:
        return self._endpoints.get(name)

    def all(self) -> dict[str, EndpointConfig]:
        return dict(self._endpoints)

    def route_table(self, nodes: int = 1) -> RouteTable:
        """Every endpoint's route, and the nodes whose proxies share each endpoint's `[limits]`."""
        entries = sorted(
            (RouteEntry(route=e.route, methods=e.methods, endpoint=e.name) for e in self._endpoints.values()),
            key=lambda entry: entry.route,
        )
        return RouteTable(entries=tuple(entries), nodes=max(1, nodes))

    def status(self) -> dict[str, EndpointStatus]:
        return {
            name: EndpointStatus(route=e.route, methods=e.methods, traffic=dict(e.traffic), shadow=dict(e.shadow),
                                 timeout_s=e.timeout_s)
            for name, e in self._endpoints.items()
        }

    def to_json(self) -> dict[str, Any]:
        return {name: e.model_dump(mode="json") for name, e in self._endpoints.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EndpointState:
        return cls({name: EndpointConfig.model_validate(item) for name, item in data.items()})


def check_backend_deletable(backend: str, endpoints: EndpointState) -> None:
    in_use = backend_in_use(backend, endpoints.all())
    if in_use:
        raise ValueError(
            f"backend {backend!r} still receives traffic from endpoint(s) {', '.join(in_use[0].endpoints)}; "
            "remove it from their traffic and shadow first"
        )
