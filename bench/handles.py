"""Handle call overhead: `await gitops.serving.handle(name).remote(x)` from one replica to another.

Behind the real controller, a caller backend makes `--calls` sequential
handle calls to a callee backend whose handler returns its argument, and
`--concurrent` calls at a time in a second run; it reports the time per
call measured inside the caller (no HTTP in it). Prints p50, p99 and
calls/s; never asserts on time. (Ray Serve's DeploymentHandle side of issue
13's bench needs `ray[serve]`, not installed here.)

    python bench/handles.py [--calls 2000] [--concurrent 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__" and Path(sys.path[0]).resolve() == ROOT / "bench":
    # Run as a script, this file's folder would shadow the project's packages.
    sys.path[0] = str(ROOT)

APPS = '''
import asyncio
import time

from gitops import serving


async def echo(value):
    return value


class Caller:
    def __init__(self, calls, concurrent):
        self.calls, self.concurrent = calls, concurrent

    async def __call__(self, request):
        callee = serving.handle("callee")
        await callee.remote(0)  # subscribe once, outside the measurement
        sequential = [await self._timed(callee, i) for i in range(self.calls)]
        started = time.perf_counter()
        for start in range(0, self.calls, self.concurrent):
            await asyncio.gather(*(callee.remote(i) for i in range(start, min(start + self.concurrent, self.calls))))
        concurrent_s = time.perf_counter() - started
        return {"sequential_s": sequential, "concurrent_calls_per_s": self.calls / concurrent_s}

    async def _timed(self, callee, value):
        started = time.perf_counter()
        await callee.remote(value)
        return time.perf_counter() - started
'''


def main() -> None:
    args = _parse()
    import httpx
    import ray

    from controller.cluster import init_ray, shutdown_ray
    from controller.proxy_fleet import PROXY_PREFIX
    from tests.real.support import eventually, met, named_actors, quick_backend, run, start_controller
    from vocabulary.configs import EndpointConfig

    namespace = "bench-handles"
    init_ray(namespace=namespace)
    code = Path(tempfile.mkdtemp(prefix="bench-handles-"))
    (code / "handles_app.py").write_text(APPS)
    client = start_controller(namespace, proxies=True)
    try:
        for backend in (
            quick_backend("callee", "handles_app:echo", working_dir=str(code), max_concurrent_queries=64),
            quick_backend("caller", "handles_app:Caller", working_dir=str(code), init_args=(args.calls, args.concurrent)),
        ):
            met(client, run(client.apply_backend(backend)))
        met(client, run(client.apply_endpoint(EndpointConfig(name="caller", route="/caller", traffic={"caller": 1.0}))))
        names = eventually(lambda: named_actors(namespace, PROXY_PREFIX), 60)
        url = "http://" + ray.get(ray.get_actor(min(names), namespace=namespace).ready.remote(), timeout=30)
        figures = httpx.get(f"{url}/caller", timeout=600).json()
    finally:
        client.shutdown()
        shutdown_ray()
    times = sorted(figures["sequential_s"])
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    print(f"handle calls, sequential: p50 {p50 * 1000:.2f} ms  p99 {p99 * 1000:.2f} ms  ({1 / p50:.0f} calls/s)")
    print(f"handle calls, {args.concurrent} at a time: {figures['concurrent_calls_per_s']:.0f} calls/s")


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=16)
    return parser.parse_args()


if __name__ == "__main__":
    main()
