"""Measurement: thousands of open server-sent-event streams at once (issue 35).

The `sse` handler (`bench.proxy_apps`) sends `SSE_RATE` (20) small events a
second for `SSE_SECONDS` (30 s) — token streaming. 1,000, then 5,000, then
10,000 clients open a stream each, all at once, behind the systems of `bench.proxy`
started by its code: ours (proxy + one replica), Ray Serve at its fastest
(direct ingress, `max_ongoing_requests` raised to 10,000 as ours'
`max_concurrent_queries`) and uvicorn + Starlette by itself.

The client is one uvloop process holding every stream on raw sockets
(`asyncio.Protocol`, its file-descriptor limit raised to the hard limit). Per
run: memory per open stream in the proxy and in the replica (KiB: the peak
RSS and PSS while every stream is open, less the figure before, divided by
the streams), the p99 gap between two events of a stream (a histogram by
millisecond of every gap), events/s, and the streams that failed (no 200),
ended short (fewer events than sent) or starved (a gap above `STARVED_S`).
The client shares the machine: when it falls behind, gaps grow; its CPU
time is reported beside the figures.

    python -m bench.streams [--tiny] [--json PATH] [--systems ours,serve-direct] [--streams 1000,5000,10000]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast
from urllib.parse import urlsplit

from bench import machine, payloads, proxy, results, stacks
from bench.proxy_apps import SSE_RATE, SSE_SECONDS

SYSTEMS = ("ours", "serve-direct", "uvicorn")
STREAMS = (1000, 5000, 10000)  # the targets name 1,000 and 5,000; 10,000 is a point kept (issue 48)
STARVED_S = 1.0
CONNECTING_AT_ONCE = 200
MAX_GAP_MS = 120_000


@dataclass
class Gaps:
    """Every gap between two events of one stream, counted by whole millisecond."""

    counts: list[int] = field(default_factory=lambda: [0] * (MAX_GAP_MS + 1))
    total: int = 0

    def add(self, seconds: float, times: int = 1) -> None:
        self.counts[min(MAX_GAP_MS, int(seconds * 1e3))] += times
        self.total += times

    def quantile_ms(self, q: float) -> float:
        if not self.total:
            return math.nan
        rank, seen = q * self.total, 0
        for ms, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                return float(ms + 1)  # the bucket's upper edge
        return float(MAX_GAP_MS)


class Stream(asyncio.Protocol):
    """One open stream: counts events (a blank line ends each) and times the gaps between them."""

    def __init__(self, request: bytes, gaps: Gaps, closed: asyncio.Future[None]) -> None:
        self._request, self._gaps, self._closed = request, gaps, closed
        self._head = b""
        self._tail = b""
        self.transport: asyncio.BaseTransport | None = None
        self.status = 0
        self.events = 0
        self.last: float | None = None
        self.max_gap_s = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        cast(asyncio.WriteTransport, transport).write(self._request)  # uvloop's transports subclass none of asyncio's

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        if not self.status:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(self._head.split(b" ", 2)[1])
            data, self._head = self._head[end + 4:], b""
        count = (self._tail + data).count(b"\n\n")
        self._tail = data[-1:]
        if count:
            if self.last is not None:
                gap = now - self.last
                self.max_gap_s = max(self.max_gap_s, gap)
                self._gaps.add(gap)
            if count > 1:
                self._gaps.add(0.0, count - 1)  # arrived together: the gap before them holds the delay
            self.last = now
            self.events += count

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


def raise_file_limit() -> int:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def memory_kib(pids: list[int]) -> dict[str, float]:
    """RSS and PSS of `pids` together, KiB (a process gone meanwhile counts 0)."""
    rss = pss = 0.0
    for pid in pids:
        try:
            rss += machine.rss_kib(pid)
            pss += machine.pss_mb(pid) * 1024
        except (OSError, ValueError):
            continue
    return {"rss": rss, "pss": pss}


async def hold(url: str, streams: int, seconds: float, pids: dict[str, list[int]]) -> dict[str, Any]:
    """Open `streams` streams of `seconds` at once, watch the servers' memory while all are open."""
    loop = asyncio.get_running_loop()
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    request = (f"GET {parts.path or '/'}?seconds={seconds:g} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               "Accept: text/event-stream\r\nConnection: close\r\n\r\n").encode()
    gaps = Gaps()
    before = {role: memory_kib(p) for role, p in pids.items()}
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    opened: list[Stream] = []
    closings: list[asyncio.Future[None]] = []
    failed = 0

    async def open_one() -> None:
        nonlocal failed
        closed: asyncio.Future[None] = loop.create_future()
        async with gate:
            try:
                _, stream = await loop.create_connection(lambda: Stream(request, gaps, closed), host, port)
            except OSError:
                failed += 1
                return
        opened.append(stream)
        closings.append(closed)

    started = time.monotonic()
    await asyncio.gather(*(open_one() for _ in range(streams)))
    connected_s = time.monotonic() - started
    peak = {role: dict(got) for role, got in before.items()}
    everything = asyncio.gather(*closings)
    deadline = started + connected_s + 2 * seconds + 30  # a stream still open then has hung: it ends short
    while not everything.done() and time.monotonic() < deadline:
        if time.monotonic() - started < seconds:  # sample while the streams are open (the first end after `seconds`)
            for role, p in pids.items():
                now = memory_kib(p)
                peak[role] = {k: max(peak[role][k], now[k]) for k in now}
        await asyncio.wait([everything], timeout=1.0)
    elapsed = time.monotonic() - started
    for stream in opened:
        if stream.transport is not None:
            stream.transport.close()
    everything.cancel()
    expected = int(seconds * SSE_RATE)
    ok = [s for s in opened if s.status == 200]
    events = sum(s.events for s in ok)
    return {
        "streams": streams, "seconds": seconds,
        "failed": failed + len(opened) - len(ok),
        "short": sum(1 for s in ok if s.events < expected),
        "starved": sum(1 for s in ok if s.max_gap_s > STARVED_S or s.events == 0),
        "events": events, "events_expected": expected * streams,
        "events_per_s": events / elapsed, "connect_s": connected_s,
        "gap_p50_ms": gaps.quantile_ms(0.5), "gap_p99_ms": gaps.quantile_ms(0.99),
        "gap_max_ms": max((s.max_gap_s * 1e3 for s in ok), default=math.nan),
        "period_ms": 1e3 / SSE_RATE,
        **{f"{role}_{kind}_kib_per_stream": (peak[role][kind] - before[role][kind]) / streams if pids[role]
           else math.nan for role in pids for kind in ("rss", "pss")},
    }


def measure(system: str, counts: tuple[int, ...], seconds: float) -> list[dict[str, Any]]:
    import uvloop

    limit = raise_file_limit()
    rows = []
    with proxy.serving(system, "sse") as urls:
        url = urls[0]
        pids = payloads.roles(system, url)
        uvloop.run(hold(url, 5, 1.0, pids))  # the first streams import and warm what every later one uses
        for count in counts:
            time.sleep(1.0)
            client_before = machine.cpu_s(os.getpid())
            got = uvloop.run(hold(url, count, seconds, pids))
            rows.append({"system": system, **got, "client_cpu_s": machine.cpu_s(os.getpid()) - client_before,
                         "file_limit": limit})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'system':<14}{'streams':>8}{'failed':>7}{'short':>6}{'starved':>8}{'events/s':>10}{'gap p99 ms':>11}"
          f"{'proxy KiB':>10}{'replica KiB':>12}  (per stream, PSS)")
    for r in rows:
        print(f"{r['system']:<14}{r['streams']:>8}{r['failed']:>7}{r['short']:>6}{r['starved']:>8}"
              f"{r['events_per_s']:>10.0f}{r['gap_p99_ms']:>11.0f}{r['proxy_pss_kib_per_stream']:>10.1f}"
              f"{r['replica_pss_kib_per_stream']:>12.1f}")


def main() -> int:
    parser = results.parser(__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--streams", default=",".join(map(str, STREAMS)))
    parser.add_argument("--seconds", type=float, default=SSE_SECONDS, help="how long each stream sends")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tiny:
        args.systems, args.streams, args.seconds = "ours", "50", 3.0
    counts = tuple(int(c) for c in str(args.streams).split(","))
    if args.child:
        import json

        print(json.dumps(measure(args.child, counts, args.seconds)))
        return 0
    chosen = [s for s in args.systems.split(",") if not s.startswith("serve") or stacks.serve_installed()]
    rows: list[dict[str, Any]] = []
    failures: dict[str, str] = {}
    arguments = ["--streams", ",".join(map(str, counts)), "--seconds", str(args.seconds)]
    for system in chosen:
        print(f"measuring {system} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(proxy.once_or_twice(partial(proxy.run_child, "bench.streams", system, arguments, 1200), system))
        except (RuntimeError, subprocess.TimeoutExpired) as error:
            failures[system] = str(error)
            print(f"  {system} failed: {error}", file=sys.stderr)
    print_table(rows)
    results.write(args.json, "streams", args.tiny, {
        "runs": rows, "failures": failures, "rate": SSE_RATE, "seconds": args.seconds, "starved_s": STARVED_S,
        "load_average": machine.describe()["load_average_1m"],
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
