"""Hostile clients at the proxy's gRPC port (issue 45's done-when): oversized messages, 10,000
concurrent streams on one connection, and a metadata (header) flood, each refused while the port
goes on serving a normal client, with the proxy worker's memory bounded.

The stack is tests/support/grpc_ingress.py's: a real controller, its proxy worker (a Ray actor) with
its gRPC port on 127.0.0.1 and `GrpcLimits`' defaults (what `gitops run --grpc-port` serves with),
replicas of the test servicer. The hostile side is a raw HTTP/2 client
(tests/support/raw_http2.py: frames written with hyperframe and hpack), because grpcio's own client
honours the server's SETTINGS_MAX_CONCURRENT_STREAMS and queues the excess calls itself, so the
server would never see them; the normal client is grpcio's, on a connection of its own.

The bound. Each test takes the worker's resident memory before the flood and the highest it had
during it (VmHWM, reset just before: a peak between two looks is caught too), and wants the growth
within 32 MiB: what the port may hold under its limits, with the allocator's slack. What it would
hold without them is far above:

- oversized messages, 50 of 5 MiB with 16 in flight (250 MiB offered): grpcio refuses a message on
  its length prefix, so it holds at most what HTTP/2 flow control let the client send before the
  refusal landed: the connection's window (`GrpcLimits.flow_window_bytes`, 1 MiB), at the very most
  a window per call in flight, 16 MiB. Before the window was fixed, grpcio's bandwidth probes grew
  it and the same flood took the worker up by 30 to 47 MiB (none of it kept).
- 10,000 streams: 100 calls at once, each a grpcio call, a Python task and its request (a few KB),
  and the frames of the refused ones, read a window at a time. The same server taking all 10,000
  streams (its max_concurrent_streams raised to 20,000, in-process) grew by 68 MB.
- the metadata flood: 100 held calls with 16 KiB of metadata each, copied a few times on the way to
  the replica (under 8 MiB); the calls of 1 MiB refused before they are routed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import grpc
import pytest

from proxy.settings import GrpcLimits
from tests.support.faults import actor_pid
from tests.support.grpc_ingress import GREETER, Served, greeting, served  # noqa: F401 — `served` is a fixture
from tests.support.process_memory import peak_resident_bytes, reset_peak, resident_bytes
from tests.support.raw_http2 import REFUSED_STREAM, RawHttp2Connection, StreamEnds
from tests.support.stack import eventually, met, quick_backend, run

pytestmark = pytest.mark.real

logger = logging.getLogger(__name__)

LIMITS = GrpcLimits()
MIB = 1 << 20
GROWTH_BOUND = 32 * MIB  # per the docstring
OVERSIZED_IN_FLIGHT = 16
HELD = "demo.Held"  # the service of the `held` endpoint: its calls take the replicas of their own backend
RESOURCE_EXHAUSTED = str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
OK = str(grpc.StatusCode.OK.value[0])


@dataclass
class Port:
    served: Served
    pid: int  # the proxy worker's process
    releases: Path  # where a test makes the file that lets its held calls go

    def hostile(self) -> RawHttp2Connection:
        return RawHttp2Connection("127.0.0.1", self.served.port)

    def still_serves(self) -> None:
        """A normal client, on a connection of its own, is answered."""
        assert self.served.unary("SayHello", b"normal", timeout=30) in (b"a: hello normal", b"b: hello normal")


@pytest.fixture(scope="module")
def port(served: Served, tmp_path_factory: pytest.TempPathFactory) -> Port:
    # Its replica takes as many calls at once as one connection may open (the default, said here).
    held = quick_backend("held", GREETER, init_args=["held"], version="held",
                         max_concurrent_queries=LIMITS.max_concurrent_streams)
    met(served.client, run(served.client.apply_backend(held)))
    met(served.client, run(served.client.apply_endpoint(greeting("held", service=HELD, traffic={"held": 1.0},
                                                                 timeout_s=120))))
    pid = actor_pid(served.proxy)
    port = Port(served, pid, tmp_path_factory.mktemp("releases"))
    port.still_serves()
    assert port.served.unary("SayHello", b"x", service=HELD, timeout=30) == b"held: hello x"
    return port


@contextlib.contextmanager
def growth(port: Port) -> Iterator[None]:
    """Asserts the worker's highest resident memory during the block within `GROWTH_BOUND` of what it
    had before; logs both (`--log-cli-level=INFO` shows them)."""
    before = resident_bytes(port.pid)
    reset_peak(port.pid)
    yield
    peak = peak_resident_bytes(port.pid)
    figures = f"the proxy worker's RSS: {before / MIB:.1f} MiB before, {peak / MIB:.1f} MiB at the peak"
    logger.info("%s", figures)
    assert peak - before <= GROWTH_BOUND, figures


def all_ended(ends: StreamEnds, count: int) -> Callable[[], bool | None]:
    return lambda: ends.ended() >= count or None


def test_oversized_messages_are_resource_exhausted_and_the_port_keeps_serving(port: Port) -> None:
    oversized = b"x" * (LIMITS.max_message_bytes + MIB)  # 5 MiB
    call = port.served.channel.unary_unary(f"/{HELD}/SayHello")

    def refused(_: int) -> grpc.StatusCode:
        with pytest.raises(grpc.RpcError) as error:
            call(oversized, timeout=60)
        return error.value.code()  # type: ignore[attr-defined,no-any-return]

    refused(0)  # the worker's first large read, its buffers made once, before the measure
    with growth(port):
        # 50 on one grpcio connection, 16 in flight: 250 MiB offered.
        with ThreadPoolExecutor(OVERSIZED_IN_FLIGHT) as pool:
            codes = Counter(pool.map(refused, range(50)))
        # A length prefix that says 4 GiB, with 10 bytes after it: refused on the prefix, nothing waited for.
        liar = port.hostile()
        try:
            liar.send([liar.call_frames(f"/{HELD}/SayHello", b"", data=struct.pack(">BI", 0, 2**32 - 1) + b"x" * 10)])
            eventually(all_ended(liar.ends, 1), 30, what="the lying call ended")
        finally:
            liar.close()
        port.still_serves()
    assert codes == {grpc.StatusCode.RESOURCE_EXHAUSTED: 50}, codes
    assert liar.ends.statuses == {1: RESOURCE_EXHAUSTED}, liar.ends


def test_10000_streams_on_one_connection_run_at_most_the_limit_and_the_rest_are_refused(port: Port) -> None:
    flood, limit = 10_000, LIMITS.max_concurrent_streams
    release = port.releases / "streams"
    hostile = port.hostile()
    try:
        with growth(port):
            # Every call holds its replica until the test lets it go: the streams the port took stay open.
            hostile.send([hostile.call_frames(f"/{HELD}/Hold", str(release).encode()) for _ in range(flood)])
            eventually(lambda: len(hostile.ends.resets) >= flood - limit or None, 60,
                       what=f"{flood - limit} streams refused")
            port.still_serves()  # meanwhile, on another connection
            held_then = dict(hostile.ends.statuses)
        release.touch()
        eventually(all_ended(hostile.ends, flood), 60, what="every stream ended")
    finally:
        hostile.close()
    ends = hostile.ends
    assert held_then == {}, f"held calls ended before the normal client was served: {held_then}"
    refused = {stream for stream, code in ends.resets.items() if stream not in ends.statuses}
    assert Counter(ends.resets[stream] for stream in refused) == {REFUSED_STREAM: len(refused)}, ends.resets
    served_calls = Counter(ends.statuses.values())
    logger.info("of %d streams on one connection, %d ran, %d were refused", flood, len(ends.statuses), len(refused))
    # The streams the port took ran (each held until released, then answered); no more than the limit.
    assert served_calls == {OK: len(ends.statuses)} and 0 < len(ends.statuses) <= limit, served_calls
    assert len(ends.statuses) + len(refused) == flood and ends.goaway is None and ends.broken is None


def test_a_metadata_flood_is_refused_and_the_port_keeps_serving(port: Port) -> None:
    path = f"/{HELD}/SayHello"
    over = LIMITS.max_metadata_bytes * 64  # 1 MiB
    with growth(port):
        # One call with 1 MiB of metadata on the wire (HEADERS and CONTINUATIONs), and one whose 4 KiB of
        # HPACK decode to 1 MiB (one 4 KB header indexed once, then named by its index 256 times).
        literal, bomb = port.hostile(), port.hostile()
        try:
            literal.send([literal.call_frames(path, b"x", [(f"x-big-{n}", os.urandom(8 * 1024).hex())
                                                           for n in range(over // (16 * 1024))])])
            bomb.send([bomb.call_frames(path, b"x", [("x-bomb", "v" * 4000)] * 256)])
            eventually(all_ended(literal.ends, 1), 30, what="the literal flood's call ended")
            eventually(all_ended(bomb.ends, 1), 30, what="the HPACK bomb's call ended")
        finally:
            literal.close()
            bomb.close()
        port.still_serves()
        # 1,000 calls at once on one connection, each with metadata just under the limit, held open.
        release = port.releases / "metadata"
        near = port.hostile()
        try:
            near.send([
                near.call_frames(f"/{HELD}/Hold", str(release).encode(),
                                 [(f"x-near-{n}", os.urandom(500).hex()) for n in range(14)])  # 14 x 1,041 bytes
                for _ in range(1_000)
            ])
            eventually(lambda: len(near.ends.resets) >= 1_000 - LIMITS.max_concurrent_streams or None, 60,
                       what="the calls past the limit refused")
            port.still_serves()  # meanwhile, on another connection
            release.touch()
            eventually(all_ended(near.ends, 1_000), 60, what="every near-limit call ended")
        finally:
            near.close()
        port.still_serves()
    for flooded in (literal.ends, bomb.ends):
        assert flooded.statuses == {1: RESOURCE_EXHAUSTED} and flooded.goaway is None, flooded
    ran = near.ends.statuses
    refused = {stream: code for stream, code in near.ends.resets.items() if stream not in ran}
    assert Counter(ran.values()) == {OK: len(ran)} and 0 < len(ran) <= LIMITS.max_concurrent_streams, ran
    assert set(refused.values()) == {REFUSED_STREAM} and len(ran) + len(refused) == 1_000, refused
