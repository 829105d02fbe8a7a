"""The replica's data listeners against hostile peers (issue 27): a real
replica serving frames on loopback TCP, raw sockets as the attacker.

Row 12: connections that never finish the handshake are bounded (a cap, a
short deadline) and their failures are logged rate-limited, not one warning
per connection.

Row 4: what a WebSocket's client sends into a replica waits within a byte
budget per session (its PUSH is answered only when there is room, so the
proxy stops reading the client), and a message over the size limit closes
the WebSocket with 1009.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import tempfile
from typing import Any

import pytest

from replica import data_socket
from replica.host import Replica
from tests.support.data_path import APPS
from vocabulary.control.actor_apis import ReplicaHandle
from vocabulary.spec.backends import BackendConfig

LOOPBACK = "127.0.0.1"


async def _replica() -> Replica:
    replica = Replica(BackendConfig(name="echo", version="v1", import_path=f"{APPS}:App"), "r1")
    await replica.initialize()
    await replica.serve_frames([tempfile.gettempdir()], tcp_host=LOOPBACK)
    return replica


def _silent_peers(port: int, count: int) -> list[socket.socket]:
    peers = []
    for _ in range(count):
        peer = socket.create_connection((LOOPBACK, port), timeout=5)
        peers.append(peer)
    return peers


def _still_open(peer: socket.socket) -> bool:
    peer.setblocking(False)
    try:
        while True:
            data = peer.recv(65536)  # the greeting, then EOF once the replica closed it
            if data == b"":
                return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def test_row12_silent_tcp_peers_are_capped_closed_after_a_short_deadline_and_logged_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    count = data_socket.MAX_UNPROVEN * 3

    async def scenario() -> dict[str, Any]:
        replica = await _replica()
        try:
            assert replica._data is not None and replica._data.tcp is not None
            port = replica._data.tcp[1]
            loop = asyncio.get_running_loop()
            peers = await loop.run_in_executor(None, _silent_peers, port, count)
            await asyncio.sleep(0.5)  # the replica has seen every one
            held = sum(await loop.run_in_executor(None, lambda: [_still_open(peer) for peer in peers]))
            unproven = replica._data.unproven
            await asyncio.sleep(data_socket.HANDSHAKE_TIMEOUT_S + 1.0)
            left = sum(await loop.run_in_executor(None, lambda: [_still_open(peer) for peer in peers]))
            for peer in peers:
                peer.close()
            await asyncio.sleep(0.2)
            return {"held": held, "unproven": unproven, "left": left, "after": replica._data.unproven}
        finally:
            await replica.prepare_for_shutdown(0)

    with caplog.at_level(logging.INFO, logger="replica.data_socket"):
        seen = asyncio.run(scenario())
    # Never more than the cap at once: the rest are closed as they connect.
    assert seen["held"] <= data_socket.MAX_UNPROVEN and seen["unproven"] <= data_socket.MAX_UNPROVEN, seen
    # A short deadline: none is held past it; the count goes back to nothing.
    assert data_socket.HANDSHAKE_TIMEOUT_S <= 2.0 and seen["left"] == 0 and seen["after"] == 0, seen
    # Logged rate-limited: a handful of lines for 96 failures, not one per peer.
    lines = [record for record in caplog.records if record.name == "replica.data_socket"]
    assert 1 <= len(lines) <= 3, [record.getMessage() for record in lines]
    assert "refused" in lines[0].getMessage()


# --- row 4: what a WebSocket's client sends into a replica is bounded ---------------------------------

MiB = 1024 * 1024


class Reader:
    """What `slow_reader` saw; `go` lets it start reading."""

    go: asyncio.Event | None = None
    received: list[int] = []
    disconnect: list[int] = []


async def slow_reader(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A WebSocket app that accepts, then reads nothing until told to."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    assert Reader.go is not None
    await Reader.go.wait()
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            Reader.disconnect.append(message.get("code", 1000))
            return
        Reader.received.append(len(message.get("bytes") or b""))


def _websocket_over_the_data_socket(scenario: Any) -> None:
    """`scenario(calls, handle, replica, outbound)` against a real replica whose
    `slow_reader` app accepted a WebSocket that came over its Unix socket."""
    from proxy.pool.socketcalls import DataConnections
    from tests.support.data_path import Calls, FakeHandle, RecordingFallback
    from vocabulary.request_path.wire import DataAddress, make_request

    async def main() -> None:
        Reader.go, Reader.received, Reader.disconnect = asyncio.Event(), [], []
        replica = Replica(BackendConfig(name="ws", version="v1", import_path=f"{__name__}:slow_reader"), "r1")
        await replica.initialize()
        path = await replica.serve_frames([tempfile.gettempdir()])
        assert path is not None

        async def ask(handle: ReplicaHandle) -> DataAddress:
            return DataAddress("node-a", path)

        calls = Calls(RecordingFallback(), DataConnections(lambda: "node-a", ask))
        handle = FakeHandle("r1")
        try:
            async with asyncio.timeout(60):
                assert await calls.connections.settled(handle) is True
                outbound = calls.open_websocket(handle, "ws1", make_request("GET", "/ws"))
                assert (await anext(outbound))["type"] == "websocket.accept"
                await scenario(calls, handle, replica, outbound)
        finally:
            calls.connections.close()
            await replica.prepare_for_shutdown(0)

    asyncio.run(main())


def test_row4_a_websocket_client_faster_than_its_app_is_held_back_within_a_byte_budget() -> None:
    from replica.calling.asgi import WEBSOCKET_BUDGET_BYTES

    seen: dict[str, Any] = {}

    async def scenario(calls: Any, handle: ReplicaHandle, replica: Replica, outbound: Any) -> None:
        message = {"type": "websocket.receive", "bytes": b"x" * MiB}
        answered = 0
        for _ in range(3 * WEBSOCKET_BUDGET_BYTES // MiB):
            try:
                await asyncio.wait_for(calls.push(handle, "ws1", message), 1.0)
            except TimeoutError:
                break  # the PUSH is not answered: no room
            answered += 1
        seen["answered"] = answered
        seen["queued"] = replica._websockets["ws1"].queued_bytes
        assert Reader.go is not None
        Reader.go.set()  # the app reads: room again, and the next PUSH is answered
        seen["after"] = await asyncio.wait_for(calls.push(handle, "ws1", message), 10)
        await calls.push(handle, "ws1", {"type": "websocket.disconnect", "code": 1000})
        await outbound.aclose()

    _websocket_over_the_data_socket(scenario)
    budget_messages = WEBSOCKET_BUDGET_BYTES // MiB
    # Held back once the budget is full (on main every PUSH was answered at once, queued without bound).
    assert seen["answered"] <= budget_messages + 1, seen
    assert seen["queued"] <= WEBSOCKET_BUDGET_BYTES + MiB, seen
    assert seen["after"] is True and len(Reader.received) >= seen["answered"], (seen, Reader.received)


def test_row4_a_websocket_message_over_the_size_limit_closes_it_with_1009() -> None:
    from replica.calling.asgi import MESSAGE_TOO_BIG, WEBSOCKET_MAX_MESSAGE_BYTES

    seen: dict[str, Any] = {}

    async def scenario(calls: Any, handle: ReplicaHandle, replica: Replica, outbound: Any) -> None:
        assert Reader.go is not None
        Reader.go.set()
        huge = {"type": "websocket.receive", "bytes": b"x" * (WEBSOCKET_MAX_MESSAGE_BYTES + 1)}
        await asyncio.wait_for(calls.push(handle, "ws1", huge), 10)
        seen["close"] = await asyncio.wait_for(anext(outbound), 10)
        for _ in range(100):
            if Reader.disconnect:
                break
            await asyncio.sleep(0.01)

    _websocket_over_the_data_socket(scenario)
    assert seen["close"]["type"] == "websocket.close" and seen["close"]["code"] == MESSAGE_TOO_BIG == 1009, seen
    assert Reader.received == [] and Reader.disconnect == [1009]
