"""Controller benchmark: how fast goals are met, idle CPU, long-poll bytes.

Prints figures; never asserts on time. Starts its own local Ray.
- time for the goal to be met: scale a backend 0 -> 1, 0 -> 8, a rolling
  update of 4 replicas, a traffic change acknowledged by every proxy;
- the controller's idle CPU with 20 backends (one replica each).
The bytes a traffic change pushes to proxies are measured by `bench.fanout`.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ray

from vocabulary.control.goal_api import PROXY_CLASS
from controller.client import ControllerClient, start_or_connect
from controller.cluster import init_ray
from vocabulary.control.actor_apis import ControllerAPI
from vocabulary.control.goals import GoalState
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.endpoints import EndpointConfig

APPS = str(ROOT / "tests" / "real" / "apps")
OPTIONS = {"proxy_class": PROXY_CLASS}


def backend(name: str, version: str, replicas: int) -> BackendConfig:
    return BackendConfig(
        name=name, version=version, import_path="controller_apps:Echo", init_args=(version,),
        num_replicas=replicas, working_dir=APPS, graceful_shutdown_timeout_s=1.0,
        ray_actor_options={"num_cpus": 0},
    )


async def timed(client: ControllerClient, call) -> float:
    started = time.perf_counter()
    goal_id = await call
    result = await client.wait_for_goal(goal_id, 300)
    elapsed = time.perf_counter() - started
    if result.state != GoalState.MET:
        raise SystemExit(f"goal not met: {result}")
    return elapsed


async def goal_times(client: ControllerClient) -> None:
    print(f"scale 0 -> 1:             {await timed(client, client.apply_backend(backend('one', 'v1', 1))):6.2f} s")
    print(f"scale 0 -> 8:             {await timed(client, client.apply_backend(backend('eight', 'v1', 8))):6.2f} s")
    await timed(client, client.apply_backend(backend('roll', 'v1', 4)))
    print(f"rolling update of 4:      {await timed(client, client.apply_backend(backend('roll', 'v2', 4))):6.2f} s")
    split = EndpointConfig(name="web", route="/web", traffic={"roll": 1.0})
    await timed(client, client.apply_endpoint(split))
    canary = split.model_copy(update={"traffic": {"roll": 0.9, "one": 0.1}})
    print(f"traffic change, acked:    {await timed(client, client.apply_endpoint(canary)):6.3f} s")
    for name in ("web",):
        await client.wait_for_goal(await client.delete_endpoint(name), 60)
    for name in ("one", "eight", "roll"):
        await client.wait_for_goal(await client.delete_backend(name), 120)


async def idle_cpu(client: ControllerClient) -> None:
    goals = [await client.apply_backend(backend(f"idle{i}", "v1", 1)) for i in range(20)]
    for goal_id in goals:
        await client.wait_for_goal(goal_id, 300)
    await asyncio.sleep(3)
    before = await client.controller.call(ControllerAPI.process_info)
    window = 20.0
    await asyncio.sleep(window)
    after = await client.controller.call(ControllerAPI.process_info)
    used = after["cpu_s"] - before["cpu_s"]
    print(f"idle CPU, 20 backends:    {100 * used / window:6.2f} % of one core "
          f"({(after['ticks'] - before['ticks']) / window:.0f} ticks/s)")
    for i in range(20):
        await client.delete_backend(f"idle{i}")


async def main() -> None:
    init_ray(namespace="bench-controller")
    namespace = f"bench-controller-{uuid.uuid4().hex[:6]}"
    client = start_or_connect(namespace=namespace, proxy_port=0, options=OPTIONS)
    try:
        await goal_times(client)
        await idle_cpu(client)
    finally:
        client.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
