"""Measurement: what the proxy spends relaying one chunk of a streamed answer (issue 35).

`proxy.pipeline.streaming.relay` over an in-memory stream whose chunks each arrive on a
later loop iteration (as frames do), sending to a callable that only counts:
the figure is the relay's own cost per chunk (its idle watch, the gap it
records, the ASGI message), its time less the bare iteration's, on uvloop
(the proxy's loop). No sockets, no Ray: a stream's per-chunk cost in the proxy
before the HTTP server and the kernel. Best of `--repeats`. Runs alone, not in
`bench.report`: it backs the cost claim in `proxy.pipeline.streaming._IdleWatch`.

    python -m bench.stream_relay [--tiny] [--json PATH] [--chunks 200000] [--repeats 3]
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, AsyncGenerator

import uvloop

from bench import machine, results
from proxy.pipeline.streaming import ChunkGaps, relay


async def _chunks(count: int) -> AsyncGenerator[bytes, None]:
    for _ in range(count):
        await asyncio.sleep(0)  # each arrives on a later loop iteration, as a frame would
        yield b"data: token\n\n"


async def _bare(count: int) -> float:
    started = time.perf_counter()
    async for _ in _chunks(count):
        pass
    return time.perf_counter() - started


def _nowhere(seconds: float) -> None:
    """A gap observed by nothing: the histogram's cost is the metrics', not the relay's."""


async def _relayed(count: int) -> float:
    async def send(message: Any) -> None:
        pass

    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def receive() -> Any:
        return await never

    started = time.perf_counter()
    await relay(_chunks(count), send, 30.0, receive, 200, ChunkGaps(_nowhere))
    return time.perf_counter() - started


def measure(count: int, repeats: int) -> dict[str, float]:
    bare = min(uvloop.run(_bare(count)) for _ in range(repeats))
    relayed = min(uvloop.run(_relayed(count)) for _ in range(repeats))
    return {"chunks": count, "bare_us_per_chunk": bare / count * 1e6,
            "relay_us_per_chunk": (relayed - bare) / count * 1e6}


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if args.tiny:
        args.chunks, args.repeats = 2_000, 1
    got = measure(args.chunks, args.repeats)
    load = machine.describe()["load_average_1m"]
    print(f"relay per chunk {got['relay_us_per_chunk']:.2f} us (bare iteration {got['bare_us_per_chunk']:.2f} us, "
          f"load average {load})")
    results.write(args.json, "stream_relay", args.tiny, {**got, "load_average": load})
    return 0


if __name__ == "__main__":
    sys.exit(main())
