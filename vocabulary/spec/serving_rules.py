"""The rules every serving state keeps, checked in one place.

A route is one the proxy can match as written (`route_problem`), and a
serving state is safe to hand to a proxy when each endpoint's traffic
weights sum to 1 (within `WEIGHT_TOLERANCE`), its traffic and shadow name
backends that exist, no backend that can have 0 replicas gets positive
traffic (unless it scales up from zero and requests wait for its cold start,
`waits_for_cold_start`), a backend `uses` only backends and endpoints
that exist, no two endpoints hold the same route (compared after
`route_key`) or the same gRPC service (`taken_grpc_services`; the v2
service's endpoints at its models' paths excepted), and no
backend an endpoint still names is deleted.

Each rule is a pure function over plain values returning `ServingProblem`s:
which rule, the endpoint (and backend) concerned, the key path in the spec
format (`("endpoints", "api", "traffic", "v2")`) and a message as a spec
file's reader sees it. The spec loader (`gitops.specs.documents`) locates
the path as FILE:LINE:COL; the controller (`controller.state.endpoint_state`)
raises them as its `ValueError`; the simulator (`gitops.reconcile.simulating`) uses
them as the invariants of every step of a plan. No I/O here.

The rules read only the attributes below, so both the runtime configs of
`vocabulary.spec` and the file specs of `gitops.specs.models` fit.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from typing import Callable, Collection, Iterable, Mapping, Protocol, Sequence

from vocabulary.request_path.v2_calls import V2_SERVICE, model_of_route

__all__ = [
    "WEIGHT_TOLERANCE",
    "Rule",
    "ServingProblem",
    "Routed",
    "Scaled",
    "route_key",
    "route_problem",
    "weights_sum_to_one",
    "zero_replica_reason",
    "waits_for_cold_start",
    "refused_traffic_reason",
    "unknown_backends",
    "unknown_match_backends",
    "unknown_callees",
    "weight_sum",
    "zero_replica_traffic",
    "taken_routes",
    "taken_grpc_services",
    "backend_in_use",
    "state_problems",
]

WEIGHT_TOLERANCE = 1e-6


class Rule(str, enum.Enum):
    UNKNOWN_BACKEND = "unknown_backend"
    WEIGHT_SUM = "weight_sum"
    ZERO_REPLICA_TRAFFIC = "zero_replica_traffic"
    ROUTE_TAKEN = "route_taken"
    GRPC_SERVICE_TAKEN = "grpc_service_taken"
    BACKEND_IN_USE = "backend_in_use"
    UNKNOWN_CALLEE = "unknown_callee"
    CIRCULAR_USES = "circular_uses"


KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class ServingProblem:
    """One broken rule. `other` is the endpoint already holding a route
    (ROUTE_TAKEN) or a gRPC service (GRPC_SERVICE_TAKEN); `endpoints` are those still naming a backend (BACKEND_IN_USE)."""

    rule: Rule
    path: KeyPath
    message: str
    endpoint: str | None = None
    backend: str | None = None
    other: str | None = None
    endpoints: tuple[str, ...] = ()


class _Matched(Protocol):
    @property
    def backend(self) -> str: ...


class Routed(Protocol):
    """An endpoint as the rules read it."""

    @property
    def match(self) -> Sequence[_Matched]: ...

    @property
    def route(self) -> str: ...

    @property
    def traffic(self) -> Mapping[str, float]: ...

    @property
    def shadow(self) -> Mapping[str, float]: ...


class _Bounds(Protocol):
    @property
    def min_replicas(self) -> int: ...


class Scaled(Protocol):
    """A backend as the rules read it."""

    @property
    def num_replicas(self) -> int: ...

    @property
    def autoscaling(self) -> _Bounds | None: ...

    @property
    def cold_start_timeout_s(self) -> float | None: ...


def route_key(route: str) -> str:
    """What makes two routes the same for the proxy: `/a`, `/a/` and `//a//` are one route."""
    return "/" + route.strip("/")


# The proxy answers these itself (`/-/routes`, `/-/healthz`).
_RESERVED_ROUTE_PREFIX = "/-/"
# A route segment as the proxy matches it: RFC 3986 path characters, never
# '%' (the proxy matches decoded paths) and never a dot segment (it refuses those).
_ROUTE_SEGMENT = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@-]+")


def route_problem(route: str) -> str | None:
    """Why the proxy could not match `route` as written, or None."""
    if not route.startswith("/"):
        return f"must start with '/' (got '{route}')"
    if any(char.isspace() or char in "?#" for char in route):
        return f"must not contain spaces, '?' or '#' (got '{route}')"
    if route.startswith(_RESERVED_ROUTE_PREFIX) or route == "/-":
        return f"'{route}' is reserved for the proxy's own paths (/-/...)"
    segments = [segment for segment in route.split("/") if segment]
    if any(segment in (".", "..") for segment in segments):
        return f"must not contain '.' or '..' segments: the proxy refuses such paths (got '{route}')"
    if any(_ROUTE_SEGMENT.fullmatch(segment) is None for segment in segments):
        return (
            "must be written as the proxy matches it: letters, digits and -._~!$&'()*+,;=:@ "
            f"between slashes, no '%' escapes (got '{route}')"
        )
    return None


def weights_sum_to_one(weights: Mapping[str, float]) -> bool:
    return math.isclose(sum(weights.values()), 1.0, abs_tol=WEIGHT_TOLERANCE)


def zero_replica_reason(backend: Scaled) -> str | None:
    """Why a backend can have 0 replicas (the key that allows it), or None."""
    if backend.autoscaling is not None:
        return "autoscaling.min_replicas = 0" if backend.autoscaling.min_replicas == 0 else None
    return "num_replicas = 0" if backend.num_replicas == 0 else None


def waits_for_cold_start(backend: Scaled) -> bool:
    """Requests to `backend` at 0 replicas wait for the autoscaler to start one.

    Only an autoscaled backend can come back from zero by itself; with a fixed
    `num_replicas = 0` nothing would ever start the replica they wait for.
    """
    return backend.cold_start_timeout_s is not None and backend.autoscaling is not None


_COLD_START_HINT = "; set cold_start_timeout_s to hold its requests while a first replica starts"


def refused_traffic_reason(backend: Scaled) -> str | None:
    """Why positive traffic to `backend` is refused (the key that makes it so), or None."""
    return None if waits_for_cold_start(backend) else zero_replica_reason(backend)


# --- one endpoint -------------------------------------------------------------------


def unknown_backends(endpoint: str, key: str, named: Iterable[str], backends: Collection[str]) -> list[ServingProblem]:
    """Each backend that `key` ("traffic" or "shadow") names and that does not exist."""
    return [
        ServingProblem(
            Rule.UNKNOWN_BACKEND,
            ("endpoints", endpoint, key, backend),
            f"endpoints.{endpoint}.{key}: backend '{backend}' is not defined",
            endpoint=endpoint,
            backend=backend,
        )
        for backend in named
        if backend not in backends
    ]


def unknown_match_backends(
    endpoint: str, backends_named: Sequence[str | None], backends: Collection[str]
) -> list[ServingProblem]:
    """Each `[[endpoints.X.match]]` rule (by position) whose backend does not exist
    (None: a rule that names no backend, reported as such elsewhere)."""
    return [
        ServingProblem(
            Rule.UNKNOWN_BACKEND,
            ("endpoints", endpoint, "match", index, "backend"),
            f"endpoints.{endpoint}.match[{index}].backend: backend '{backend}' is not defined",
            endpoint=endpoint,
            backend=backend,
        )
        for index, backend in enumerate(backends_named)
        if backend is not None and backend not in backends
    ]


def unknown_callees(
    backend: str, uses: Sequence[str | None], backends: Collection[str], endpoints: Collection[str]
) -> list[ServingProblem]:
    """Each name in `[backends.X] uses` (by position) that is neither a backend
    nor an endpoint (None: an entry that is not a name, reported as such elsewhere)."""
    return [
        ServingProblem(
            Rule.UNKNOWN_CALLEE,
            ("backends", backend, "uses", index),
            f"backends.{backend}.uses[{index}]: '{name}' is neither a backend nor an endpoint",
            backend=backend,
        )
        for index, name in enumerate(uses)
        if name is not None and name not in backends and name not in endpoints
    ]


def circular_uses(
    uses: Mapping[str, Sequence[str]], endpoint_backends: Mapping[str, Collection[str]]
) -> list[ServingProblem]:
    """Backends whose `uses` lead back to themselves (through other backends, or
    endpoints and the backends they send traffic to): a request would call itself
    without end. One problem per cycle, at the `uses` of its first backend by name."""
    def callees(backend: str) -> list[str]:
        found: list[str] = []
        for name in uses.get(backend, ()):
            found.extend(sorted(endpoint_backends[name]) if name in endpoint_backends and name not in uses
                         else [name])
        return [name for name in found if name in uses]

    problems: list[ServingProblem] = []
    reported: set[frozenset[str]] = set()
    for start in sorted(uses):
        path = _cycle_from(start, callees)
        if path is None or frozenset(path) in reported:
            continue
        reported.add(frozenset(path))
        shown = " -> ".join([*path, start])
        problems.append(ServingProblem(
            Rule.CIRCULAR_USES, ("backends", start, "uses"),
            f"backends.{start}.uses: calls go round in a circle ({shown}); a request would call itself without end",
            backend=start,
        ))
    return problems


def _cycle_from(start: str, callees: Callable[[str], list[str]]) -> list[str] | None:
    """The backends of a path from `start` back to itself, depth first; None when there is none."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for callee in callees(node):
            if callee == start:
                return path
            if callee not in seen:
                seen.add(callee)
                stack.append((callee, [*path, callee]))
    return None


def weight_sum(endpoint: str, traffic: Mapping[str, float]) -> list[ServingProblem]:
    if weights_sum_to_one(traffic):
        return []
    message = f"endpoints.{endpoint}.traffic: weights sum to {sum(traffic.values()):g}, not 1"
    return [ServingProblem(Rule.WEIGHT_SUM, ("endpoints", endpoint, "traffic"), message, endpoint=endpoint)]


def zero_replica_traffic(
    endpoint: str, traffic: Mapping[str, float], backends: Mapping[str, Scaled | None]
) -> list[ServingProblem]:
    """Positive traffic to a backend that can have 0 replicas and does not wait
    for a cold start (None: a backend not known well enough to tell)."""
    problems: list[ServingProblem] = []
    for backend, weight in traffic.items():
        target = backends.get(backend)
        reason = None if target is None or weight <= 0 else refused_traffic_reason(target)
        if reason is not None:
            message = (
                f"endpoints.{endpoint}.traffic: backend '{backend}' gets {weight * 100:g}% of the traffic "
                f"but can have 0 replicas ({reason}){_COLD_START_HINT if target is not None and target.autoscaling else ''}"
            )
            path = ("endpoints", endpoint, "traffic", backend)
            problems.append(
                ServingProblem(Rule.ZERO_REPLICA_TRAFFIC, path, message, endpoint=endpoint, backend=backend)
            )
    return problems


# --- across endpoints ------------------------------------------------------------------


def taken_routes(endpoints: Mapping[str, Routed]) -> list[ServingProblem]:
    """Each endpoint whose route an earlier one (in `endpoints`' order) already holds."""
    owners: dict[str, str] = {}
    problems: list[ServingProblem] = []
    for name, endpoint in endpoints.items():
        owner = owners.setdefault(route_key(endpoint.route), name)
        if owner != name:
            message = f"endpoints.{name}.route: '{endpoint.route}' is already the route of endpoint '{owner}'"
            problems.append(
                ServingProblem(Rule.ROUTE_TAKEN, ("endpoints", name, "route"), message, endpoint=name, other=owner)
            )
    return problems


def taken_grpc_services(endpoints: Mapping[str, Routed]) -> list[ServingProblem]:
    """Each endpoint whose `grpc_service` an earlier one (in `endpoints`' order) already serves:
    a gRPC call names its service only, so one service is one endpoint's. The v2 service
    (`vocabulary.request_path.v2_calls`) is the exception: its calls name their model, so any
    number of endpoints at a model's REST path (`/v2/models/NAME`) serve it beside one other."""
    owners: dict[str, str] = {}
    problems: list[ServingProblem] = []
    for name, endpoint in endpoints.items():
        service = getattr(endpoint, "grpc_service", None)
        if service is None or (service == V2_SERVICE and model_of_route(endpoint.route) is not None):
            continue
        owner = owners.setdefault(service, name)
        if owner != name:
            message = f"endpoints.{name}.grpc_service: '{service}' is already served by endpoint '{owner}'"
            if service == V2_SERVICE:
                message += (
                    "; several endpoints serve it when all but one have the route of the model their calls "
                    "name (route = \"/v2/models/NAME\")"
                )
            problems.append(ServingProblem(
                Rule.GRPC_SERVICE_TAKEN, ("endpoints", name, "grpc_service"), message, endpoint=name, other=owner,
            ))
    return problems


def backend_in_use(backend: str, endpoints: Mapping[str, Routed]) -> list[ServingProblem]:
    """Deleting `backend` while endpoints still send it traffic, matched requests or shadow copies."""
    users = tuple(sorted(name for name, e in endpoints.items() if backend in _named(e)))
    if not users:
        return []
    message = f"backends.{backend}: still named by endpoint(s) {', '.join(users)}"
    return [ServingProblem(Rule.BACKEND_IN_USE, ("backends", backend), message, backend=backend, endpoints=users)]


def _named(endpoint: Routed) -> set[str]:
    return {*endpoint.traffic, *endpoint.shadow, *(rule.backend for rule in endpoint.match)}


def state_problems(backends: Mapping[str, Scaled], endpoints: Mapping[str, Routed]) -> list[ServingProblem]:
    """Every rule a whole serving state breaks, endpoint by endpoint, then routes."""
    problems: list[ServingProblem] = []
    for name, endpoint in endpoints.items():
        problems += unknown_backends(name, "traffic", endpoint.traffic, backends)
        problems += unknown_backends(name, "shadow", endpoint.shadow, backends)
        problems += unknown_match_backends(name, [rule.backend for rule in endpoint.match], backends)
        problems += weight_sum(name, endpoint.traffic)
        problems += zero_replica_traffic(name, endpoint.traffic, backends)
    return problems + taken_routes(endpoints) + taken_grpc_services(endpoints)
