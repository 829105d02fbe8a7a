"""Faults the scenarios inject, and what they look for afterwards.

Owns killing a Ray actor's process the hard way (`kill9`: SIGKILL to the pid
the actor reports about itself, not `ray.kill`, so Ray learns of it as it
would of a crash), and counting the named actors of a namespace that
nothing accounts for (`leaked_replicas`, `leftover_actors`).
"""

from __future__ import annotations

import os
import signal
from typing import Any, cast

import ray
from ray.actor import ActorHandle

from controller.state.backend_state import REPLICA_PREFIX
from vocabulary.control.status import ClusterStatus

__all__ = ["actor_pid", "kill9", "leaked_replicas", "leftover_actors"]


def _own_pid(_actor: Any) -> int:
    return os.getpid()


def actor_pid(handle: ActorHandle[Any]) -> int:
    # cast: mypy reads `ray.get` of this call as its list overload.
    return cast(int, ray.get(handle.__ray_call__.remote(_own_pid), timeout=30))


def kill9(handle: ActorHandle[Any]) -> int:
    """SIGKILL the actor's worker process; returns its pid."""
    pid = actor_pid(handle)
    os.kill(pid, signal.SIGKILL)
    return pid


def _names(namespace: str) -> list[str]:
    return [
        actor["name"] for actor in ray.util.list_named_actors(all_namespaces=True)
        if actor["namespace"] == namespace
    ]


def leaked_replicas(namespace: str, status: ClusterStatus) -> int:
    """Replica actors alive in Ray that the controller's status does not list, plus duplicates."""
    listed = [
        REPLICA_PREFIX + replica.replica_id
        for backend in status.backends.values()
        for replica in backend.replicas
    ]
    alive = {name for name in _names(namespace) if name.startswith(REPLICA_PREFIX)}
    return len(alive - set(listed)) + (len(listed) - len(set(listed)))


def leftover_actors(namespace: str) -> list[str]:
    """Every named actor still alive in `namespace` (after a shutdown: none)."""
    return sorted(_names(namespace))
