"""The proxy's own cost per request, in one process: CPU time (or instructions) per GET (or POST), no Ray.

`bench.proxy` measures requests per second through the whole system (wrk,
the proxy worker, the data link, the replica) on a machine other work
shares, so a few percent of the proxy's own cost is lost in its noise. This
driver keeps only the proxy: `ProxyApp` served by `httpedge.server` as a
proxy worker builds them (`proxy.actor`: a capture writer, no tracing, no
metrics port), one endpoint `/` with one backend of one replica, and a fake
replica call that answers the noop handler's answer after one turn of the
event loop (as a real call's answer arrives: its task is woken by a
callback). The HTTP bytes wrk sends are fed to one connection's protocol
(`data_received`), the answer is written to a transport that keeps only its
size, N times in a row, on uvloop as in a proxy worker.

It prints the CPU time per request (`time.process_time`) after a warm-up.
`--body N` sends a POST with an N-byte body instead (in the same packet as
its head, as a small request's comes), for the cost of reading a body.
For a figure that other processes cannot move, count instructions with
callgrind: `--callgrind` switches its instrumentation on around the measured
runs only (`callgrind_control`), and `--loop frozen` runs asyncio's loop
with its clock stopped, so no timer fires (the running calls' sweep, the
keep-alive clock: how often they fire under valgrind would depend on the
machine's load) and the count repeats to within a few instructions per
request; the instructions per request are the file's total over N:

    python -m bench.proxy_cost [--requests 20000] [--repeats 5] [--loop uvloop|asyncio|frozen] [--body BYTES]
    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/cg.out \
        python -m bench.proxy_cost --requests 2000 --repeats 1 --loop frozen --callgrind

Measures nothing of the replica or the data link (`bench.proxy_profile` for
their shares under load).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import time
from typing import Any, Awaitable, Callable, TypeVar, cast

from httpedge.server import Server, _Connection
from proxy.app import ProxyApp
from proxy.observability.capture import CaptureWriter
from proxy.pool.calling import Caller
from proxy.routes.subscriptions import Subscriptions
from proxy.settings import ProxySettings
from vocabulary.control.longpoll import ReplicaInfo, ReplicaSet, RouteEntry, RouteTable
from vocabulary.spec.endpoints import EndpointConfig

T = TypeVar("T")
REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n\r\n"  # what wrk sends
# The noop handler's answer as the replica sends it (`bench.proxy_apps.noop`: "ok", a Starlette response).
ANSWER = (200, [(b"content-length", b"2"), (b"content-type", b"text/plain; charset=utf-8")], b"ok")


def post(size: int) -> bytes:
    """A POST of `size` body bytes, head and body in one piece."""
    return b"POST / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Length: %d\r\n\r\n%s" % (size, b"x" * size)


class _Caller:
    """A replica call answered after one turn of the loop, as a real call's answer wakes its task."""

    async def call(self, handle: Any, request: Any, timeout_s: float, batching: Any = None) -> Any:
        answered = asyncio.get_running_loop().create_future()
        answered.get_loop().call_soon(answered.set_result, ANSWER)
        return await answered


class _Transport:
    """A connection's transport that keeps the size of what was written."""

    def __init__(self) -> None:
        self.written = 0

    def write(self, data: bytes) -> None:
        self.written += len(data)

    def writelines(self, pieces: Any) -> None:
        self.written += sum(len(piece) for piece in pieces)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 40000)}.get(name, default)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        raise AssertionError("the proxy closed a keep-alive connection")

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _app(settings: ProxySettings) -> ProxyApp:
    """A proxy worker's app serving `/` from one backend of one replica."""
    rng = random.Random(0)
    app = ProxyApp(cast(Caller, _Caller()), settings, rng, capture=CaptureWriter("bench:0", rng))  # plain calls only
    subscriptions = Subscriptions(settings, rng)
    replicas = ReplicaSet(
        backend="bench", max_concurrent_queries=100,
        replicas=(ReplicaInfo(replica_id="r1", actor_name="r1", handle=object()),),
    )
    app.install(subscriptions.apply({
        "routes": (1, RouteTable(entries=(RouteEntry(route="/", methods=("GET", "POST"), endpoint="bench"),))),
        "endpoint:bench": (2, EndpointConfig(name="bench", route="/", traffic={"bench": 1.0})),
        "replicas:bench": (3, replicas),
    }))
    return app


async def serve(
    requests: int, repeats: int, around: Callable[[str], None] = lambda _: None, request: bytes = REQUEST,
) -> list[float]:
    """CPU seconds per request of each of `repeats` runs of `requests` requests (a GET unless `request`
    says otherwise) on one connection; `around("on")` is called before the measured runs, `around("off")`
    after them."""
    settings = ProxySettings()
    connection = _Connection(Server(_app(settings), settings.edge))
    transport = _Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]

    async def run(count: int) -> None:
        for _ in range(count):
            connection.data_received(request)
            task = connection.active.task if connection.active is not None else None
            if task is None:
                raise AssertionError("the request was not started")
            await task

    await run(min(requests, 1000))  # warm-up: imports, caches, the first route table's chains
    written = transport.written
    costs = []
    around("on")
    for _ in range(repeats):
        started = time.process_time()
        await run(requests)
        costs.append((time.process_time() - started) / requests)
    around("off")
    if transport.written <= written:
        raise AssertionError("no answer was written")
    return costs


def _callgrind(state: str) -> None:
    """Switch callgrind's instrumentation of this process on or off (it takes the command at its next poll)."""
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    time.sleep(0.5)


async def _frozen(work: Awaitable[T]) -> T:
    """`work` on a loop whose clock stands still: a timer armed for later never fires."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    loop.time = lambda: now  # type: ignore[method-assign]
    return await work


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000, help="GETs per measured run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop", choices=("uvloop", "asyncio", "frozen"), default="uvloop",
                        help="frozen: asyncio's loop with its clock stopped (no timer fires)")
    parser.add_argument("--callgrind", action="store_true", help="switch callgrind on around the measured runs only")
    parser.add_argument("--body", type=int, help="POST a body of this many bytes instead of a GET")
    args = parser.parse_args()
    request = REQUEST if args.body is None else post(args.body)
    work = serve(args.requests, args.repeats, _callgrind if args.callgrind else lambda _: None, request)
    if args.loop == "uvloop":
        import uvloop

        costs = uvloop.run(work)
    else:
        costs = asyncio.run(_frozen(work) if args.loop == "frozen" else work)
    micros = sorted(cost * 1e6 for cost in costs)
    kind = "GETs" if args.body is None else f"POSTs of {args.body} bytes"
    print(f"{args.requests} {kind} x {args.repeats}: CPU per request {micros[len(micros) // 2]:.2f} us (median; "
          f"min {micros[0]:.2f}, max {micros[-1]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
