"""Batching: req/s of a model with a fixed cost per call, batched and not.

A model whose every call costs `--call-ms` of CPU (a forward pass's fixed
overhead: kernel launch, Python dispatch) plus `--item-ms` per request runs
behind the real controller and proxy twice: as a plain handler (one request
per call; the proxy still coalesces Ray calls) and with
`[batching] max_batch_size = 16, batch_wait_timeout_s = 0.005` (one call per
list). The same wrk load (32 connections) hits both. Prints req/s, p50, p99
and the ratio; never asserts on time. (Ray Serve's `@serve.batch` side of
issue 13's bench needs `ray[serve]`, not installed here.)

    python bench/batching.py [--duration 10] [--connections 32] [--call-ms 4] [--item-ms 0.2]
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

from bench.proxy import run_wrk  # noqa: E402  (after the sys.path fix)

MODEL = '''
import time


def _busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class OneByOne:
    def __init__(self, call_s, item_s):
        self.call_s, self.item_s = call_s, item_s

    def __call__(self, request):
        _busy(self.call_s + self.item_s)
        return "ok"


class Batched(OneByOne):
    def __call__(self, requests):
        _busy(self.call_s + self.item_s * len(requests))
        return ["ok"] * len(requests)
'''


def main() -> None:
    args = _parse()
    from controller.cluster import init_ray, shutdown_ray
    from tests.real.support import met, quick_backend, run, start_controller
    from vocabulary.configs import BatchingConfig, EndpointConfig

    init_ray(namespace="bench-batching")
    code = Path(tempfile.mkdtemp(prefix="bench-batching-"))
    (code / "model.py").write_text(MODEL)
    client = start_controller("bench-batching", proxies=True)
    try:
        url = _proxy_url()
        init = (args.call_ms / 1000, args.item_ms / 1000)
        batching = BatchingConfig(max_batch_size=16, batch_wait_timeout_s=0.005)
        results = {}
        for name, path, extra in (
            ("one-by-one", "model:OneByOne", {}),
            ("batched", "model:Batched", {"batching": batching}),
        ):
            backend = quick_backend(name, path, init_args=init, working_dir=str(code), max_concurrent_queries=64, **extra)
            met(client, run(client.apply_backend(backend)))
            met(client, run(client.apply_endpoint(EndpointConfig(name=name, route=f"/{name}", traffic={name: 1.0}))))
            results[name] = run_wrk(f"{url}/{name}", args.duration, args.connections)
    finally:
        client.shutdown()
        shutdown_ray()
    print(f"model: {args.call_ms} ms per call + {args.item_ms} ms per request; {args.connections} connections")
    for name, figures in results.items():
        print(
            f"{name:>11}: {figures['rps']:8.0f} req/s  p50 {figures['p50_ms']:6.1f} ms  "
            f"p99 {figures['p99_ms']:6.1f} ms  non-2xx {figures['non_2xx']:.0f}"
        )
    base = results["one-by-one"]["rps"] or float("nan")
    print(f"batched / one-by-one: {results['batched']['rps'] / base:.2f}x")


def _proxy_url() -> str:
    import ray

    from controller.proxy_fleet import PROXY_PREFIX
    from tests.real.support import eventually, named_actors

    names = eventually(lambda: named_actors("bench-batching", PROXY_PREFIX), 60)
    return "http://" + ray.get(ray.get_actor(min(names), namespace="bench-batching").ready.remote(), timeout=30)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--call-ms", type=float, default=4.0)
    parser.add_argument("--item-ms", type=float, default=0.2)
    return parser.parse_args()


if __name__ == "__main__":
    main()
