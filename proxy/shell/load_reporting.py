"""Periodic load reports to the controller: per backend, requests in flight and queued,
the sum of the loads its replicas reported (`ray_gitops.serving.report_load`),
the answers counted so far, and the replicas found stalled. A multiplexed
backend's in flight is its hottest model's load (`proxy.pool.multiplexing.hot_ongoing`),
so a hot model held by few replicas scales the backend up.

The controller's autoscaler reads the load (`report_load(proxy_id, {backend:
(ongoing, queued)}, requests, {backend: reported})`); reports expire there after a few seconds, so a
missed one costs nothing and failures are only logged once per streak. The
request counts (`vocabulary.control.request_stats.RequestStats` as JSON, cumulative
since the proxy started) are what rollout checks judge; the same per endpoint
go to the status. Replicas the proxy found stalled (`proxy.pool.stalls`) are
reported with every load until the controller stops listing them; it
replaces them. So are the replicas it ejected as outliers (`proxy.pool.outliers`),
for the status, and those ejected too often, for the controller to replace.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from proxy.shell.controller_link import ControllerLink
from vocabulary.control.actor_apis import ControllerAPI
from vocabulary.control.request_stats import RequestStats

__all__ = ["report_load_forever"]

logger = logging.getLogger(__name__)

Loads = dict[str, dict[str, float]]


async def report_load_forever(
    link: ControllerLink, proxy_id: str, loads: Callable[[], Loads], interval_s: float,
    requests: Callable[[], dict[str, RequestStats]],
    endpoint_requests: Callable[[], dict[str, RequestStats]] | None = None,
    stalled: Callable[[], dict[str, dict[str, str]]] | None = None,
    ejected: Callable[[], dict[str, dict[str, dict[str, Any]]]] | None = None,
) -> None:
    failing = False
    while True:
        await asyncio.sleep(interval_s)
        # Requests turned away for want of a replica count as queued demand,
        # so a backend scaled to zero is scaled up again by its traffic.
        current = loads()
        report = {
            backend: (int(load.get("hot", load["ongoing"])), int(load["queued"] + load.get("unserved", 0)))
            for backend, load in current.items()
        }
        reported = {backend: load["reported"] for backend, load in current.items() if "reported" in load}
        counted = {backend: stats.model_dump(mode="json") for backend, stats in requests().items()}
        by_endpoint = {name: stats.model_dump(mode="json") for name, stats in (endpoint_requests or dict)().items()}
        hung = (stalled or dict)()
        out = (ejected or dict)()
        try:
            controller = await link.get()
            # By name: five optional parts of one report, easy to swap by position.
            await controller.call(
                ControllerAPI.report_load, proxy_id, report,
                requests=counted, endpoint_requests=by_endpoint, reported=reported, stalled=hung or None,
                ejected=out or None,
            )
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 — reporting must never stop serving
            if not failing:
                logger.info("load report to %s failed: %s", link.name, error)
            failing = True
            link.forget()
            continue
        failing = False
