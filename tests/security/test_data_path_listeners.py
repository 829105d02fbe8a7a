"""The replica's data listeners against hostile peers (issue 27): a real
replica serving frames on loopback TCP, raw sockets as the attacker.

Row 12: connections that never finish the handshake are bounded (a cap, a
short deadline) and their failures are logged rate-limited, not one warning
per connection.
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
from tests.component.data_path import APPS

LOOPBACK = "127.0.0.1"


async def _replica() -> Replica:
    replica = Replica("echo", "r1", "v1", f"{APPS}:App")
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
