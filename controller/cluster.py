"""Starting or joining Ray, quietly.

Owns the process-wide Ray connection settings: an embedded local Ray with no
dashboard, no usage stats, no token-auth warning and enough worker start-up
concurrency for a burst of replicas (see ../shared/RAY_NOTES.md), or a join
of an existing cluster. Nothing else here: actors live in other modules.
"""

from __future__ import annotations

import logging
import os

from vocabulary.goal_api import DEFAULT_NAMESPACE

__all__ = ["init_ray", "shutdown_ray"]

_QUIET_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_worker_maximum_startup_concurrency": "16",
    # Ray prints a deduplication notice and progress bars otherwise.
    "RAY_DEDUP_LOGS": "0",
}


def init_ray(address: str | None = None, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Connect this process to Ray: join `address`, or start a local instance."""
    import ray

    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    if ray.is_initialized():
        return
    options: dict = {
        "namespace": namespace,
        "logging_level": logging.ERROR,
        "log_to_driver": False,
    }
    if address is None:
        options["include_dashboard"] = False
    else:
        options["address"] = address
    ray.init(**options)


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
