"""gRPC through our proxy against the same servicer on grpcio directly and Ray Serve's gRPC ingress (issue 45).

Two calls, each unary (`bench.grpc_apps`):

- noop: `bench.Pinger/Ping`, a `BytesValue` in, a constant one out;
- v2: `inference.GRPCInferenceService/ModelInfer` of a 1×16 FP32 tensor (raw
  contents, as Triton's client sends it) to a model answering y = 2x.

Served three ways:

- ours: `Pinger` as a backend and `Doubler` as a `protocol = "v2"` backend,
  one replica each, behind our controller and proxy's gRPC port
  (`proxy_grpc_port`, the node's default proxy workers) on a local Ray of
  the measuring process's own;
- grpcio: the same servicer and the same v2 service (ray_gitops.v2's
  `V2GrpcService`) on `grpc.aio.server` in a process of its own: what no
  proxy in front of it can beat;
- Serve: Ray Serve 2.60's gRPC ingress (`grpc_servicer_functions`), one
  replica each, `max_ongoing_requests=100`, access log off, at its fastest:
  `RAY_SERVE_ENABLE_DIRECT_INGRESS=1`, each replica's own gRPC port
  (serve-direct; `--serve-proxy`: through its gRPC proxy instead, about five
  times slower here). Only when it is installed (`bench.stacks.serve_measured`).

All three are up at once, each in its own processes (Serve with a local
Ray of its own, as ours turns Ray's token auth on in the process that
starts it), and measured alternating within each round, so each sees the
same machine load: on a shared machine the load moves more between
minutes than between neighbouring runs.

The load generator is grpcio's own asyncio client in the measuring process
(the official client; no ghz here, and a Go binary cannot be installed from
the registries this project uses): `in_flight` calls at once spread over
`CHANNELS` channels (HTTP/2 connections), each call sent again as soon as
it is answered, for a fixed time; its CPU use is recorded (`client_cores`:
near 1.0, the client is the limit). Loopback only. Figures per (system,
call, in flight): calls/s, p50 and p99 (medians of the rounds with
[min–max]), calls and errors; ratios ours ÷ grpcio and ours ÷ Serve.
Issue 45's targets: noop calls/s ahead of Serve's gRPC ingress and ≥ 0.7×
grpcio's, judged in `bench.targets`. Never asserts on time.

    python -m bench.grpc [--tiny] [--json PATH] [--serve-proxy]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import grpc
import numpy as np
from google.protobuf.wrappers_pb2 import BytesValue

from bench import grpc_apps, machine, results, stats
from bench.stacks import free_port, own_ray, poll, serve_installed, serve_measured

ROOT = Path(__file__).resolve().parent.parent
CHANNELS = 4
CALL_TIMEOUT_S = 10.0
SERVE_SYSTEMS = ("serve-proxy", "serve-direct")
DIRECT_INGRESS = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}


@dataclass(frozen=True)
class Size:
    rounds: int
    duration_s: float
    warmup_s: float
    in_flight: tuple[int, ...]


FULL = Size(rounds=3, duration_s=5.0, warmup_s=1.0, in_flight=(1, 32))
TINY = Size(rounds=1, duration_s=1.0, warmup_s=0.2, in_flight=(8,))


@dataclass(frozen=True)
class Call:
    """One of the two calls: its method path and the request's bytes."""

    method: str
    request: bytes


V2_INPUT = np.arange(grpc_apps.V2_WIDTH, dtype=np.float32).reshape(1, grpc_apps.V2_WIDTH)


def _v2_request() -> bytes:
    from ray_gitops.v2.proto import grpc_predict_v2_pb2 as v2

    request = v2.ModelInferRequest(model_name=grpc_apps.V2_MODEL, id="bench")
    request.inputs.add(name="x", datatype="FP32", shape=V2_INPUT.shape)
    request.raw_input_contents.append(V2_INPUT.tobytes())
    return request.SerializeToString()


CALLS = {
    "noop": Call(f"/{grpc_apps.PINGER_SERVICE}/Ping", BytesValue(value=b"ping").SerializeToString()),
    "v2": Call(f"/{grpc_apps.V2_SERVICE}/ModelInfer", _v2_request()),
}


@dataclass(frozen=True)
class Target:
    """Where a system serves one of the calls, and the metadata its calls carry (Serve's proxy: the app)."""

    address: str
    metadata: tuple[tuple[str, str], ...] = ()


# --- the load generator ----------------------------------------------------------------------------


async def drive(target: Target, call: Call, in_flight: int, duration_s: float) -> dict[str, Any]:
    """`in_flight` calls at once over `CHANNELS` channels for `duration_s`: calls/s, p50/p99 ms, errors."""
    channels = [grpc.aio.insecure_channel(target.address) for _ in range(min(CHANNELS, in_flight))]
    latencies: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    try:
        await asyncio.gather(*(channel.channel_ready() for channel in channels))
        stubs = [channel.unary_unary(call.method) for channel in channels]
        deadline = time.perf_counter() + duration_s

        async def caller(stub: Any) -> None:
            while (started := time.perf_counter()) < deadline:
                try:
                    await stub(call.request, metadata=target.metadata, timeout=CALL_TIMEOUT_S)
                except grpc.aio.AioRpcError as error:
                    errors[error.code().name] += 1
                    continue
                latencies.append(time.perf_counter() - started)

        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(caller(stubs[n % len(stubs)]) for n in range(in_flight)))
        elapsed = time.perf_counter() - started
        client_cores = (time.process_time() - cpu) / elapsed
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))
    latencies.sort()
    return {"calls_per_s": len(latencies) / elapsed, "p50_ms": stats.quantile(latencies, 0.5) * 1e3,
            "p99_ms": stats.quantile(latencies, 0.99) * 1e3, "calls": len(latencies), "errors": sum(errors.values()),
            "error_codes": dict(errors), "client_cores": client_cores}


def answers_right(targets: dict[str, Target]) -> bool:
    """One call of each kind, its answer checked: the pong, and y = 2x."""
    from ray_gitops.v2.proto import grpc_predict_v2_pb2 as v2

    replies = {}
    for name, call in CALLS.items():
        with grpc.insecure_channel(targets[name].address) as channel:
            replies[name] = channel.unary_unary(call.method)(call.request, metadata=targets[name].metadata,
                                                             timeout=CALL_TIMEOUT_S)
    inferred = v2.ModelInferResponse.FromString(replies["v2"])
    y = np.frombuffer(inferred.raw_output_contents[0], dtype=np.float32)
    return bool(replies["noop"] == grpc_apps.PONG.SerializeToString() and np.array_equal(y, V2_INPUT.ravel() * 2))


def wait_serving(targets: dict[str, Target], what: str) -> None:
    def right() -> bool:
        try:
            return answers_right(targets)
        except grpc.RpcError:
            return False
    poll(right, 120, f"{what} answering both calls", interval_s=0.2)


def measure(systems: dict[str, dict[str, Target]], size: Size) -> list[dict[str, Any]]:
    """Every (system, call, in flight), the systems alternating within each round; spreads over the rounds."""
    for targets in systems.values():
        for name, call in CALLS.items():
            asyncio.run(drive(targets[name], call, max(size.in_flight), size.warmup_s))
    measured: dict[tuple[str, str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for _ in range(size.rounds):
        for name, call in CALLS.items():
            for in_flight in size.in_flight:
                for system, targets in systems.items():
                    run = asyncio.run(drive(targets[name], call, in_flight, size.duration_s))
                    measured[(system, name, in_flight)].append(run)
    return [
        {"system": system, "call": name, "in_flight": in_flight,
         **{key: stats.spread(r[key] for r in runs) for key in ("calls_per_s", "p50_ms", "p99_ms", "client_cores")},
         "calls": sum(r["calls"] for r in runs), "errors": sum(r["errors"] for r in runs),
         "error_codes": dict(sum((collections.Counter(r["error_codes"]) for r in runs), collections.Counter()))}
        for (system, name, in_flight), runs in measured.items()
    ]


# --- the systems -------------------------------------------------------------------------------------


class _OnGrpcio:
    """A servicer whose methods take the request alone, with the signature grpcio calls: (request, context)."""

    def __init__(self, servicer: Any) -> None:
        self._servicer = servicer

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)

        async def called(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await method(request)
        return called


def serve_on_grpcio(port: int) -> None:
    """The grpcio system: `Pinger` and the v2 service on `grpc.aio.server` (runs until killed). The v2
    service takes and answers the messages' bytes, as in our replicas: no (de)serializer is given."""
    async def run() -> None:
        server = grpc.aio.server()
        grpc_apps.add_PingerServicer_to_server(_OnGrpcio(grpc_apps.Pinger()), server)
        infer = grpc.unary_unary_rpc_method_handler(_OnGrpcio(grpc_apps.doubler_service()).ModelInfer)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            grpc_apps.V2_SERVICE, {"ModelInfer": infer}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(run())


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@contextlib.contextmanager
def on_grpcio() -> Iterator[dict[str, Target]]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "bench.grpc", "--serve-grpcio", str(port)], cwd=ROOT, env=_env())
    try:
        targets = {name: Target(f"127.0.0.1:{port}") for name in CALLS}
        wait_serving(targets, "grpcio")
        yield targets
    finally:
        server.kill()
        server.wait()


@contextlib.contextmanager
def ours() -> Iterator[dict[str, Target]]:
    """Our controller and proxy (gRPC port on) on a local Ray of this process's own, both backends up."""
    from controller.client import start_or_connect
    from controller.cluster import init_ray, shutdown_ray
    from vocabulary.control.goal_api import PROXY_CLASS
    from vocabulary.control.goals import GoalState
    from vocabulary.spec.backends import BackendConfig
    from vocabulary.spec.endpoints import EndpointConfig

    own_ray()
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    init_ray(namespace=namespace)
    port = free_port()
    options = {"proxy_class": PROXY_CLASS, "proxy_grpc_port": port, "proxy_workers": 0}  # `gitops run`'s workers
    client = start_or_connect(namespace=namespace, proxy_port=free_port(), options=options)

    async def deploy() -> None:
        pinger = BackendConfig(name="pinger", version="v1", import_path="bench.grpc_apps:Pinger",
                               ray_actor_options={"num_cpus": 0}, max_concurrent_queries=100)
        endpoints = [EndpointConfig(name="pinger", route="/pinger", traffic={"pinger": 1.0},
                                    grpc_service=grpc_apps.PINGER_SERVICE),
                     EndpointConfig(name="v2", route="/v2", traffic={grpc_apps.V2_MODEL: 1.0},
                                    grpc_service=grpc_apps.V2_SERVICE)]
        goals = [await client.apply_backend(pinger), await client.apply_backend(grpc_apps.doubler_backend())]
        goals += [await client.apply_endpoint(endpoint) for endpoint in endpoints]
        for goal in goals:
            result = await client.wait_for_goal(goal, 120)
            if result.state != GoalState.MET:
                raise RuntimeError(f"goal not met: {result}")

    try:
        asyncio.run(deploy())
        targets = {name: Target(f"127.0.0.1:{port}") for name in CALLS}
        wait_serving(targets, "our proxy's gRPC port")
        yield targets
    finally:
        client.shutdown()
        shutdown_ray()


@contextlib.contextmanager
def serve(direct: bool) -> Iterator[dict[str, Target]]:
    """Ray Serve's gRPC ingress with both apps (`RAY_SERVE_ENABLE_DIRECT_INGRESS` is the caller's to set)."""
    import ray
    from ray import serve as ray_serve

    from bench.proxy import kill_haproxy
    from controller.cluster import init_ray, shutdown_ray

    own_ray()
    init_ray(namespace=f"bench-{uuid.uuid4().hex[:6]}")
    http_port, grpc_port = free_port(), free_port()
    functions = [f"bench.grpc_apps:{name}" for name in
                 ("add_PingerServicer_to_server", "add_GRPCInferenceServiceServicer_to_server")]
    ray_serve.start(http_options={"host": "127.0.0.1", "port": http_port},
                    grpc_options={"port": grpc_port, "grpc_servicer_functions": functions})
    fastest = ray_serve.deployment(max_ongoing_requests=100, logging_config={"enable_access_log": False},
                                   ray_actor_options={"num_cpus": 0})
    try:
        for name, servicer in (("noop", grpc_apps.Pinger), ("v2", grpc_apps.ServeV2)):
            ray_serve.run(fastest(servicer).bind(), name=name, route_prefix=f"/{name}")
        if direct:
            controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
            targets = {name: Target(_direct_grpc_target(controller, name, grpc_port)) for name in CALLS}
        else:
            targets = {name: Target(f"127.0.0.1:{grpc_port}", (("application", name),)) for name in CALLS}
        wait_serving(targets, "Serve's gRPC ingress")
        yield targets
    finally:
        ray_serve.shutdown()
        kill_haproxy(http_port)
        shutdown_ray()


def _direct_grpc_target(controller: Any, app: str, proxy_port: int, timeout_s: float = 120) -> str:
    """The gRPC port of `app`'s replica, as Serve's direct ingress reports it (the node's address: loopback
    here); Serve names its proxy's port instead while the app has no running replica."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ports = sorted({t.port for group in ray.get(controller.get_target_groups.remote(app))
                        if group.protocol == "gRPC" and group.app_name == app for t in group.targets} - {proxy_port})
        if ports:
            return f"127.0.0.1:{ports[0]}"
        time.sleep(0.2)
    raise RuntimeError(f"Serve never reported a direct-ingress gRPC port for {app}")


@contextlib.contextmanager
def held_serve(config: str) -> Iterator[dict[str, Target]]:
    """Serve in a process of its own (`--hold`: its own local Ray, as ours turns Ray's token auth on in this
    one), serving until this block ends; yields where it serves the calls."""
    env = {**_env(), **(DIRECT_INGRESS if config == "serve-direct" else {})}
    holder = subprocess.Popen([sys.executable, "-m", "bench.grpc", "--hold", config], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        line = next((line for line in holder.stdout if line.startswith("{")), None)
        if line is None:
            raise RuntimeError(f"Serve ({config}) did not start: exit {holder.wait()}")
        yield {name: Target(address, tuple(tuple(pair) for pair in metadata))
               for name, (address, metadata) in json.loads(line).items()}
    finally:
        holder.stdin.close()  # its signal to shut Serve down
        try:
            holder.wait(timeout=120)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


def hold(config: str) -> None:
    """The `--hold` process: Serve up, where it serves printed as one JSON line, until stdin closes."""
    with serve(direct=config == "serve-direct") as targets:
        print(json.dumps({name: [t.address, t.metadata] for name, t in targets.items()}), flush=True)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the parent reads no further: later output to stderr
        sys.stdin.read()


def child(serve_config: str | None, size: Size) -> dict[str, Any]:
    """grpcio, Serve (`serve_config`, when given) and ours up at once, measured alternating in each round."""
    failures = {}
    with contextlib.ExitStack() as stack:
        systems = {"grpcio": stack.enter_context(on_grpcio())}
        if serve_config is not None:
            try:
                systems[serve_config] = stack.enter_context(held_serve(serve_config))
            except RuntimeError as error:  # ours and grpcio are still measured
                failures[serve_config] = str(error)
        systems["ours"] = stack.enter_context(ours())
        return {"runs": measure(systems, size), "failures": failures}


def in_subprocess(serve_config: str | None, tiny: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.grpc", "--child", *(["--beside", serve_config] if serve_config else []),
               *(["--tiny"] if tiny else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=1500)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"exit {done.returncode}: " + "\n".join(done.stderr.strip().splitlines()[-6:]))
    return dict(json.loads(lines[-1]))


# --- figures and printing ------------------------------------------------------------------------------


def _median(run: dict[str, Any] | None, key: str = "calls_per_s") -> float | None:
    value = run[key]["median"] if run else None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def ratios(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (call, in flight): ours' calls/s ÷ grpcio's and ÷ Serve's fastest configuration's."""
    rows = []
    for name, in_flight in sorted({(r["call"], r["in_flight"]) for r in runs}):
        at = {r["system"]: r for r in runs if (r["call"], r["in_flight"]) == (name, in_flight)}
        serve = max((at[s] for s in SERVE_SYSTEMS if _median(at.get(s))), key=_median, default=None)  # type: ignore[arg-type]
        ours, direct = _median(at.get("ours")), _median(at.get("grpcio"))
        rows.append({"call": name, "in_flight": in_flight,
                     "vs_grpcio": ours / direct if ours and direct else None,
                     "vs_serve": ours / _median(serve) if ours and serve else None,  # type: ignore[operator]
                     "serve_fastest": serve["system"] if serve else None})
    return rows


def print_figures(runs: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<13} {'call':<5} {'in flight':>9} {'calls/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'errors':>7} {'client cores':>13}")
    for r in sorted(runs, key=lambda r: (r["call"], r["in_flight"], r["system"])):
        print(f"{r['system']:<13} {r['call']:<5} {r['in_flight']:>9} {r['calls_per_s']['median']:>9,.0f} "
              f"{r['p50_ms']['median']:>8.2f} {r['p99_ms']['median']:>8.2f} {r['errors']:>7} "
              f"{r['client_cores']['median']:>13.2f}")
    for row in rows:
        vs_serve = (f"{row['vs_serve']:.2f}x ({row['serve_fastest']})" if row["vs_serve"] else "—")
        vs_grpcio = f"{row['vs_grpcio']:.2f}x" if row["vs_grpcio"] else "—"
        print(f"ours, {row['call']} at {row['in_flight']} in flight: ÷ grpcio {vs_grpcio} (target ≥ 0.70x), "
              f"÷ Serve {vs_serve} (target > 1x)")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--serve-proxy", action="store_true", help="Serve through its gRPC proxy, not direct ingress")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--beside", help=argparse.SUPPRESS)
    parser.add_argument("--hold", help=argparse.SUPPRESS)
    parser.add_argument("--serve-grpcio", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = TINY if args.tiny else FULL
    if args.serve_grpcio:
        serve_on_grpcio(args.serve_grpcio)
        return 0
    if args.hold:
        hold(args.hold)
        return 0
    if args.child:
        print(json.dumps(child(args.beside, size)))
        return 0
    # Serve's gRPC ingress imports grpc_reflection (the `bench` extra brings it): without it, ours and grpcio only.
    with_serve = serve_measured("grpc", args.tiny) and importlib.util.find_spec("grpc_reflection") is not None
    serve_config = ("serve-proxy" if args.serve_proxy else "serve-direct") if with_serve else None
    load_before = machine.describe()["load_average_1m"]
    print(f"measuring grpcio, {serve_config or 'no Serve'} and ours ...", file=sys.stderr, flush=True)
    try:
        measured = in_subprocess(serve_config, args.tiny)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    if not serve_installed() or importlib.util.find_spec("grpc_reflection") is None:
        print("Ray Serve's gRPC ingress is not installed (`pip install -e '.[bench]'`): ours and grpcio only.")
    runs, rows = measured["runs"], ratios(measured["runs"])
    print_figures(runs, rows)
    results.write(args.json, "grpc", args.tiny, {
        "runs": runs, "ratios": rows, "failures": measured["failures"], "rounds": size.rounds,
        "duration_s": size.duration_s, "channels": CHANNELS, "v2_width": grpc_apps.V2_WIDTH,
        "load_average": [load_before, machine.describe()["load_average_1m"]],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
