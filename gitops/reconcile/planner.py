"""Planning: the ordered actions that take the actual serving state to the desired one.

`plan(desired, actual)` is pure and deterministic: no I/O, no clock, and the
same inputs always give the same actions in the same order. It assumes
`desired` is valid (as `gitops.specs.loading` guarantees) and `actual` is what a
controller reports; it never talks to either.

Apply order (owned here; docs/architecture.md), with the refinements
that keep every intermediate state safe (`gitops.reconcile.simulating.unsafe_reasons`):

1. Create and update backends — so every backend an endpoint will name
   exists, at its new version and size, before traffic moves to it. Callees
   come first: a backend that `uses` another backend (or an endpoint, and so
   that endpoint's backends) is created or updated after it, and its action
   names them in `after` so the applier waits for their goals; backends that
   use each other (a cycle) share a layer. Within a layer, by name.
2. Create and update endpoints (route, methods, traffic, shadow), by name.
   Route handoff: an endpoint that takes a route another endpoint still
   holds waits (for the next pass by name) until that endpoint has moved
   away; if the holder is being removed, its delete comes forward to just
   before the taker. Routes that
   move in a cycle (a swap) cannot be handed over one call at a time
   without a duplicate route, so the first endpoint of the cycle (by name)
   is deleted and recreated: its old and new routes answer 404 for the
   moment between those calls, and no two endpoints ever share a route.
3. Delete the remaining endpoints that left git, by name.
4. Deferred backend updates, by name: a backend whose new config may run
   zero replicas while some endpoint still sends it positive traffic is
   updated only now, after the endpoints have moved that traffic away.
   Doing it in step 1 would leave an endpoint routing to a backend with no
   replicas. The whole update waits, not just the scale-down: splitting it
   would roll out a new version only to stop it a moment later. (Shadow and zero-weight references do not defer: shadow
   copies are fire-and-forget and can never fail the primary request.)
5. Delete backends that left git, callers before the callees they `use`
   (named in `after`), then by name; by now no endpoint names them, not even
   as shadow.

Comparisons: a backend differs when `BackendConfig.comparable()` differs,
except that `num_replicas` is the autoscaler's business for a backend that
autoscales in `desired`. An update restarts replicas exactly when `version`
changes; every other difference is applied in place.
"""

from __future__ import annotations

from typing import Any, Mapping

from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.base import SOURCE_FIELDS
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.state import ServingState
from gitops.reconcile.plans import Action, ActionKind, FieldChange, Plan

__all__ = ["plan", "backend_changes", "endpoint_changes", "secret_changes", "model_changes"]

_DEFERRED = "after endpoints move its traffic away"


def plan(desired: ServingState, actual: ServingState) -> Plan:
    """The actions, in apply order, that turn `actual` into `desired`."""
    early, deferred = (_callees_first(actions, desired) for actions in _backend_updates(desired, actual))
    endpoint_actions = _endpoint_actions(desired, actual)
    return Plan(actions=(*early, *endpoint_actions, *deferred, *_backend_deletes(desired, actual)))


def backend_changes(old: BackendConfig, new: BackendConfig) -> tuple[FieldChange, ...]:
    """What differs between two configs of one backend, as `new` sees it."""
    if _same_backend(old, new):
        return ()
    before, after = old.comparable(), new.comparable()
    if new.autoscaling is not None:
        # The autoscaler owns the replica count; git only sets its bounds.
        before.pop("num_replicas")
        after.pop("num_replicas")
    # A secret's change is told by its keyed hash and shown by name only.
    digests = before.pop("secret_digests", {}), after.pop("secret_digests", {})
    # A model shows as its digest (`~ model NAME sha256 9f86… → 1b4e…`), not as the tables holding it.
    before.pop("models", None), after.pop("models", None)
    models = before.pop("model_sources", {}), after.pop("model_sources", {})
    return _field_changes(before, after) + secret_changes(*digests) + model_changes(*models)


def endpoint_changes(old: EndpointConfig, new: EndpointConfig) -> tuple[FieldChange, ...]:
    if old.__dict__ == new.__dict__:
        return ()
    return _field_changes(old.model_dump(mode="json"), new.model_dump(mode="json"))


# Fields left out of the quick equality check, as `comparable()` leaves them out.
_UNCOMPARED: dict[str, Any] = dict.fromkeys(SOURCE_FIELDS)
_UNCOMPARED_AUTOSCALED: dict[str, Any] = {**_UNCOMPARED, "num_replicas": 0}


def _same_backend(old: BackendConfig, new: BackendConfig) -> bool:
    """Equal for planning, without dumping: the steady state (an agent tick
    on an unchanged commit) compares every backend, so this must be cheap."""
    masked = _UNCOMPARED_AUTOSCALED if new.autoscaling is not None else _UNCOMPARED
    return {**old.__dict__, **masked} == {**new.__dict__, **masked}


def secret_changes(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[FieldChange, ...]:
    """`~ secret db (changed)` for each secret whose keyed hash differs: added,
    removed or changed, never a value nor a hash."""
    changes = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            how = "added" if name not in old else "removed" if name not in new else "changed"
            changes.append(FieldChange(field=f"secret {name}", new=how))
    return tuple(changes)


def model_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    """One change per model added, removed, or with a new digest, source or load
    timeout (JSON forms of `ModelConfig`, by name); `old` and `new` are digests
    (`model NAME sha256`) or, when only where it comes from changed, the field."""
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if before is None or after is None or before["sha256"] != after["sha256"]:
            changes.append(
                FieldChange(
                    field=f"model {name} sha256",
                    old=None if before is None else before["sha256"],
                    new=None if after is None else after["sha256"],
                )
            )
            continue
        for key in sorted(after):
            if before.get(key) != after[key]:
                changes.append(FieldChange(field=f"model {name} {key}", old=before.get(key), new=after[key]))
    return tuple(changes)


def _field_changes(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> tuple[FieldChange, ...]:
    changes: list[FieldChange] = []
    for field, new_value in new.items():
        old_value = old.get(field)
        if old_value == new_value:
            continue
        if field == "autoscaling" and isinstance(old_value, dict) and isinstance(new_value, dict):
            changes.extend(_field_changes(old_value, new_value, prefix=f"{field}."))
        else:
            changes.append(FieldChange(field=prefix + field, old=old_value, new=new_value))
    return tuple(changes)


# --- backends -----------------------------------------------------------------


def _backend_updates(desired: ServingState, actual: ServingState) -> tuple[list[Action], list[Action]]:
    """Creates and updates: those safe to run first, and those deferred to step 4."""
    early: list[Action] = []
    deferred: list[Action] = []
    carrying = _backends_with_positive_traffic(actual)
    for name, new in sorted(desired.backends.items()):
        old = actual.backends.get(name)
        if old is None:
            early.append(Action(kind=ActionKind.CREATE_BACKEND, name=name, backend=new))
            continue
        changes = backend_changes(old, new)
        if not changes:
            continue
        must_wait = name in carrying and new.refuses_traffic()
        action = Action(
            kind=ActionKind.UPDATE_BACKEND,
            name=name,
            backend=new,
            restarts=old.code_identity() != new.code_identity(),
            changes=changes,
            reason=_DEFERRED if must_wait else "",
        )
        (deferred if must_wait else early).append(action)
    return early, deferred


def _backends_with_positive_traffic(state: ServingState) -> frozenset[str]:
    return frozenset(
        backend
        for endpoint in state.endpoints.values()
        for backend, weight in endpoint.traffic.items()
        if weight > 0
    )


def _backend_deletes(desired: ServingState, actual: ServingState) -> list[Action]:
    gone = set(actual.backends) - set(desired.backends)
    if not gone:
        return []
    layers = _layers(actual)
    callers: dict[str, set[str]] = {name: set() for name in gone}
    for caller in gone:
        for callee in _callees(caller, actual) & gone - {caller}:
            callers[callee].add(caller)
    return [
        Action(kind=ActionKind.DELETE_BACKEND, name=name, after=tuple(sorted(callers[name])))
        for name in sorted(gone, key=lambda name: (-layers[name], name))
    ]


# --- `uses`: callees before callers -------------------------------------------------


def _callees(name: str, state: ServingState) -> frozenset[str]:
    """The backends `name` calls through handles: those it uses, and the
    backends of the endpoints it uses."""
    called: set[str] = set()
    for used in state.backends[name].uses:
        endpoint = state.endpoints.get(used)
        called |= endpoint.backends() if endpoint is not None else {used}
    return frozenset(backend for backend in called if backend in state.backends)  # O(callees), not O(backends)


def _layers(state: ServingState) -> dict[str, int]:
    """Each backend's layer: 0 calls nothing, a caller is one above its
    highest callee; the members of a cycle share a layer."""
    graph = {name: _callees(name, state) for name in state.backends}
    layers: dict[str, int] = {}
    for component in _cycles_grouped(graph):  # callees' components come first
        members = set(component)
        below = [layers[c] + 1 for name in component for c in graph[name] if c not in members]
        layers.update(dict.fromkeys(component, max(below, default=0)))
    return layers


def _cycles_grouped(graph: Mapping[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's, iterative: no recursion limit
    on long `uses` chains), each after every component it points to."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, callees = work[-1]
            if callees:
                callee = callees.pop(0)
                if callee not in index:
                    index[callee] = low[callee] = len(index)
                    stack.append(callee)
                    on_stack.add(callee)
                    work.append((callee, sorted(graph[callee])))
                elif callee in on_stack:
                    low[node] = min(low[node], index[callee])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while not component or component[-1] != node:
                    component.append(stack.pop())
                    on_stack.discard(component[-1])
                components.append(sorted(component))
    return components


def _callees_first(actions: list[Action], desired: ServingState) -> list[Action]:
    """Backend creates and updates by layer, then name; each names its callees
    among them in `after`."""
    if not actions:
        return []
    layers = _layers(desired)
    acting = {action.name for action in actions}
    ordered = sorted(actions, key=lambda action: (layers[action.name], action.name))
    return [
        action.model_copy(update={"after": _after(action.name, desired, layers, acting)}) for action in ordered
    ]


def _after(name: str, desired: ServingState, layers: Mapping[str, int], acting: set[str]) -> tuple[str, ...]:
    """The callees of `name` whose actions must finish first (not those in its own cycle)."""
    return tuple(sorted(c for c in _callees(name, desired) & acting if layers[c] < layers[name]))


# --- endpoints ----------------------------------------------------------------


class _EndpointSequencer:
    """Orders endpoint creates, updates and deletes so that no route is ever held twice.

    It walks the changes like the controller will apply them, tracking which
    endpoint holds each route after every emitted action.
    """

    def __init__(self, desired: ServingState, actual: ServingState) -> None:
        self.current: dict[str, EndpointConfig] = dict(actual.endpoints)
        self.holders: dict[str, str] = {config.route: name for name, config in actual.endpoints.items()}
        self.pending: dict[str, EndpointConfig] = {
            name: config
            for name, config in sorted(desired.endpoints.items())
            if name not in actual.endpoints or endpoint_changes(actual.endpoints[name], config)
        }
        self.leaving: set[str] = set(actual.endpoints) - set(desired.endpoints)
        self.actions: list[Action] = []

    def run(self) -> list[Action]:
        # Passes in name order: each applies every change whose route is free;
        # a change that waits for a route is retried in the next pass.
        while self.pending:
            progressed = [name for name in list(self.pending) if self._try(name)]
            if not progressed:
                self._break_cycle()
        for name in sorted(self.leaving):
            self._delete(name)
        return self.actions

    def _try(self, name: str) -> bool:
        config = self.pending[name]
        holder = self.holders.get(config.route, name)
        if holder in self.leaving:
            self._delete(holder, reason=f"frees route {config.route} for endpoint {name}")
            holder = name
        if holder != name and holder in self.pending:
            return False
        # A holder that neither leaves nor moves means `desired` itself has a
        # duplicate route; plan it anyway and let validation or the controller
        # say so, rather than never finishing.
        self._upsert(name, config)
        return True

    def _break_cycle(self) -> None:
        """Every pending change waits on another: delete one member of a cycle."""
        name = next(iter(self.pending))
        seen: list[str] = []
        while name not in seen:
            seen.append(name)
            name = self.holders[self.pending[name].route]
        cycle = seen[seen.index(name) :]
        victim = min(cycle)
        self._delete(victim, reason="recreated: its route moves in a cycle")

    def _upsert(self, name: str, config: EndpointConfig) -> None:
        old = self.current.get(name)
        if old is None:
            action = Action(kind=ActionKind.CREATE_ENDPOINT, name=name, endpoint=config)
        else:
            changes = endpoint_changes(old, config)
            action = Action(kind=ActionKind.UPDATE_ENDPOINT, name=name, endpoint=config, changes=changes)
            if self.holders.get(old.route) == name:
                del self.holders[old.route]
        self.actions.append(action)
        self.current[name] = config
        self.holders[config.route] = name
        del self.pending[name]

    def _delete(self, name: str, reason: str = "") -> None:
        old = self.current.pop(name)
        if self.holders.get(old.route) == name:
            del self.holders[old.route]
        self.leaving.discard(name)
        self.actions.append(Action(kind=ActionKind.DELETE_ENDPOINT, name=name, reason=reason))


def _endpoint_actions(desired: ServingState, actual: ServingState) -> list[Action]:
    return _EndpointSequencer(desired, actual).run()
