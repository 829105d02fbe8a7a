"""How fast a bad canary is stopped: from its first request to traffic back at the old split.

A fresh local Ray runs a controller and its proxy on loopback, two backends
(`v1` good, `v2` failing 20% of its requests) and an endpoint moving from
`v1` to `v2` with a [rollout] (first step 25%, `min_requests = 10`,
`max_error_ratio = 0.05`). An open-loop client sends requests at a fixed
rate; the time from the first answer by `v2` to its last one is how long
users met the bad canary. Printed beside the step interval, at each rate
(the rate reached is printed too: a small machine may not reach the one
asked for). Never asserts on time.

    python -m bench.canary [--rates 50 500] [--interval 10]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and Path(sys.path[0]).resolve() == ROOT / "bench":
    # Run as a script, this file's folder would shadow the project's packages.
    sys.path[0] = str(ROOT)

import httpx
import ray

from controller.shell.ray_adapter import PROXY_PREFIX
from tests.support.stack import eventually, met, named_actors, quick_backend, run, start_controller
from controller.client import result
from vocabulary.control.actor_apis import ProxyAPI, Remote
from vocabulary.spec.endpoints import EndpointConfig
from vocabulary.spec.rollout_config import RolloutConfig


async def paced(url: str, rate: float, duration_s: float) -> list[tuple[float, str, int]]:
    """Requests started every 1/rate s for duration_s: (answered at, backend, status)."""
    answers: list[tuple[float, str, int]] = []
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(timeout=10, limits=limits) as client:

        async def one() -> None:
            try:
                reply = await client.get(url)
            except httpx.HTTPError:
                return
            answers.append((time.monotonic(), reply.json().get("backend", "?"), reply.status_code))

        tasks = []
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < duration_s:
            due = start + sent / rate
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.ensure_future(one()))
            sent += 1
        await asyncio.gather(*tasks)
    return answers


def measure(client, url: str, name: str, rate: float, interval_s: float) -> tuple[float, float]:
    for backend, share in ((f"{name}-v1", 0.0), (f"{name}-v2", 0.2)):
        config = quick_backend(backend, "canary_handlers:Versioned", init_args=(backend, share), version=backend)
        met(client, run(client.apply_backend(config)))
    rollout = RolloutConfig(steps=(0.25, 0.5, 1.0), step_interval_s=interval_s, min_requests=10, max_error_ratio=0.05)

    def endpoint(traffic: dict[str, float]) -> None:
        config = EndpointConfig(name=name, route=f"/{name}", methods=("GET",), traffic=traffic, rollout=rollout)
        met(client, run(client.apply_endpoint(config)))

    endpoint({f"{name}-v1": 1.0})

    async def scenario() -> list[tuple[float, str, int]]:
        load = asyncio.ensure_future(paced(f"{url}/{name}", rate, interval_s + 5))
        await asyncio.sleep(1.0)
        await asyncio.to_thread(endpoint, {f"{name}-v2": 1.0})
        return await load

    answers = asyncio.run(scenario())
    canary = [at for at, backend, _ in answers if backend == f"{name}-v2"]
    reached = len(answers) / (answers[-1][0] - answers[0][0]) if len(answers) > 1 else 0.0
    return (canary[-1] - canary[0] if canary else float("nan")), reached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[50.0, 500.0])
    parser.add_argument("--interval", type=float, default=10.0, help="step_interval_s of the rollout")
    args = parser.parse_args()
    ray.init(include_dashboard=False, logging_level=logging.WARNING)
    namespace = f"bench-rollout-{uuid.uuid4().hex[:6]}"
    client = start_controller(namespace, proxies=True)
    try:
        names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60)
        proxy: Remote[ProxyAPI] = Remote(ray.get_actor(min(names), namespace=namespace))
        url = "http://" + result(proxy.call(ProxyAPI.ready), timeout_s=30)
        print(f"{'asked req/s':>12} {'reached req/s':>14} {'step interval s':>16} {'bad canary served for s':>24}")
        for index, rate in enumerate(args.rates):
            exposed, reached = measure(client, url, f"r{index}", rate, args.interval)
            print(f"{rate:>12.0f} {reached:>14.0f} {args.interval:>16.1f} {exposed:>24.2f}")
    finally:
        client.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
