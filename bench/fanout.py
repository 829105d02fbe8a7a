"""Measurement 7: bytes pushed to a proxy for one traffic change, by number of endpoints.

A real controller (no proxies, backends with zero replicas: nothing but
configuration) holds N endpoints; a subscriber long-polls every key as a
proxy does; one endpoint's traffic changes; the answer of the next long
poll is what a proxy receives (pickled, as Ray ships it). Next to it: what
a broadcast of every endpoint would cost. Flat in N is the target.

    python -m bench.fanout [--tiny] [--json PATH] [--sizes 10 100 1000]
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import uuid
from typing import Any

from bench import results
from bench.stacks import own_ray

SIZES = (10, 100, 1_000)


async def pushed_bytes(client: Any, sizes: tuple[int, ...]) -> list[dict[str, int]]:
    from vocabulary.control.actor_apis import ControllerAPI
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import EndpointConfig
    from vocabulary.control.goal_api import LongPollKey

    for name in ("b0", "b1"):
        backend = BackendConfig(name=name, version="v1", import_path="bench.proxy_apps:noop", num_replicas=0)
        await client.wait_for_goal(await client.apply_backend(backend), 60)
    rows, made = [], 0
    for count in sizes:
        for i in range(made, count):
            await client.apply_endpoint(EndpointConfig(name=f"e{i}", route=f"/e{i}", traffic={"b0": 1.0}))
        made = count
        keys = {LongPollKey.ROUTES: -1, **{LongPollKey.endpoint(f"e{i}"): -1 for i in range(count)}}
        first = await client.controller.call(ControllerAPI.listen_for_change, keys, "bench")
        held = {key: snapshot for key, (snapshot, _) in first.items()}
        changed = EndpointConfig(name="e3", route="/e3", traffic={"b0": 0.9, "b1": 0.1})
        await client.apply_endpoint(changed)
        pushed = await client.controller.call(ControllerAPI.listen_for_change, held, "bench")
        everything = {k: v for k, (_, v) in first.items() if k.startswith("endpoint:")}
        rows.append({"endpoints": count, "pushed_bytes": len(pickle.dumps(pushed)), "pushed_keys": len(pushed),
                     "broadcast_bytes": len(pickle.dumps(everything))})
        await client.apply_endpoint(EndpointConfig(name="e3", route="/e3", traffic={"b0": 1.0}))
    return rows


def measure(sizes: tuple[int, ...]) -> list[dict[str, int]]:
    from controller.client import start_or_connect
    from controller.cluster import init_ray, shutdown_ray

    own_ray()
    init_ray(namespace="bench-fanout")
    client = start_or_connect(namespace=f"bench-fanout-{uuid.uuid4().hex[:6]}", proxy_port=0,
                              options={"proxy_class": None})
    try:
        return asyncio.run(pushed_bytes(client, sizes))
    finally:
        client.shutdown()
        shutdown_ray()


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    sizes = (10, 100) if args.tiny else tuple(args.sizes)
    rows = measure(sizes)
    for row in rows:
        print(f"{row['endpoints']:>6} endpoints: pushed {row['pushed_bytes']:>7} B in {row['pushed_keys']} key(s); "
              f"a broadcast of every endpoint: {row['broadcast_bytes']:>9} B")
    results.write(args.json, "fanout", args.tiny, {"rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
