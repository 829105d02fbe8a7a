"""What "met" means for each goal kind: predicates over observed state.

Owns the fingerprints that identify a requested config (so a changed request
supersedes an older goal) and `judge`, which looks at backends, endpoints,
long-poll acknowledgements and the live proxies, and returns a `Judgement`.
Pure: every input is passed in.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable

from vocabulary.control.goal_api import LongPollKey
from controller.state.backend_state import BackendState
from vocabulary.control.goals import GoalState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig
from controller.state.endpoint_state import EndpointState
from controller.state.goals import PENDING, Goal, GoalKind, Judgement
from controller.state.longpoll import LongPollHost

__all__ = ["fingerprint", "judge"]

_MET = Judgement(GoalState.MET)
_SUPERSEDED = Judgement(GoalState.SUPERSEDED)


def fingerprint(config: BackendConfig | EndpointConfig | None) -> str:
    if config is None:
        return ""
    text = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def judge(
    goal: Goal,
    backends: BackendState,
    endpoints: EndpointState,
    longpoll: LongPollHost,
    live_proxies: Iterable[str],
    serving_proxies: Iterable[str] | None = None,
) -> Judgement:
    """`live_proxies`: every node's proxy not known dead; `serving_proxies`:
    those whose HTTP server answers (all live ones when not given)."""
    proxies = list(live_proxies)
    serving = set(proxies if serving_proxies is None else serving_proxies)
    if goal.kind == GoalKind.BACKEND_READY:
        return _backend_ready(goal, backends, longpoll, proxies)
    if goal.kind == GoalKind.BACKEND_DELETED:
        if backends.config(goal.name) is not None:
            return _SUPERSEDED
        return _MET if backends.is_gone(goal.name) else PENDING
    if goal.kind == GoalKind.ENDPOINT_ACKED:
        config = endpoints.get(goal.name)
        if config is None or fingerprint(config) != goal.fingerprint:
            return _SUPERSEDED
        keys = [LongPollKey.ROUTES, LongPollKey.endpoint(goal.name)]
        keys += [LongPollKey.replicas(b) for b in sorted(config.backends())]
        # Met means every node's proxy serves the change over HTTP, so a
        # starting proxy holds the goal until its server listens.
        serves = set(proxies) <= serving
        return _MET if serves and _all_acked(longpoll, proxies, keys) else PENDING
    if endpoints.get(goal.name) is not None:
        return _SUPERSEDED
    serves = set(proxies) <= serving
    return _MET if serves and _all_acked(longpoll, proxies, [LongPollKey.ROUTES]) else PENDING


def _backend_ready(
    goal: Goal, backends: BackendState, longpoll: LongPollHost, proxies: list[str]
) -> Judgement:
    config = backends.config(goal.name)
    if config is None or fingerprint(config) != goal.fingerprint:
        return _SUPERSEDED
    verdict, reason = backends.readiness(goal.name, config.version)
    if verdict == "failed":
        return Judgement(GoalState.FAILED, reason)
    if verdict != "met":
        return PENDING
    # Proxies already routing to this backend must hold its new replica set.
    key = LongPollKey.replicas(goal.name)
    subscribed = [p for p in proxies if longpoll.subscribed(p, key)]
    return _MET if _all_acked(longpoll, subscribed, [key]) else PENDING


def _all_acked(longpoll: LongPollHost, proxies: list[str], keys: list[str]) -> bool:
    return all(longpoll.acked(proxy, key) for proxy in proxies for key in keys)
