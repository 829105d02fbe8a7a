"""Real listeners on loopback for the security and admin tests, and a raw-socket client.

`serving` runs one of the agent's listeners (`gitops.admin.api.server`, our
HTTP edge `httpedge.server`) in a thread for the duration, `serving_proxy`
an app behind the edge as the proxy actor serves it; `RawClient`
speaks HTTP/1.1 byte by byte, so tests can drip, truncate or oversize a
request the way an attacker would.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import time
from typing import Iterator

from gitops.admin.api import ADMIN_LIMITS, server
from httpedge.asgi import App
from httpedge.limits import EdgeLimits
from httpedge.server import Server

__all__ = ["serving", "serving_proxy", "RawClient"]


@contextlib.contextmanager
def serving(app: App, limits: EdgeLimits = ADMIN_LIMITS) -> Iterator[int]:
    """Serve `app` on a free loopback port; yields the port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    listener = server(app, "127.0.0.1", 0, limits)
    thread = threading.Thread(target=lambda: asyncio.run(listener.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not listener.started:
        thread.join(0.01)
    try:
        yield int(sock.getsockname()[1])
    finally:
        listener.stop()
        thread.join(10)
        sock.close()


@contextlib.contextmanager
def serving_proxy(app: App, limits: EdgeLimits) -> Iterator[int]:
    """`app` behind the proxy actor's server (`proxy.actor`: WebSockets on) on a free loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    edge = Server(app, limits, websockets=True)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(edge.serve([sock])), daemon=True)
    thread.start()
    while not edge.started:
        thread.join(0.01)
    try:
        yield int(sock.getsockname()[1])
    finally:
        asyncio.run_coroutine_threadsafe(edge.shutdown(1.0), loop).result(10)
        thread.join(10)
        loop.close()
        sock.close()


class RawClient:
    """One TCP connection; `answer()` reads the status line and headers of the reply."""

    def __init__(self, port: int, timeout_s: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.opened = time.monotonic()

    def send(self, data: bytes) -> bool:
        """False once the server answered (or stopped taking bytes)."""
        if self.replied():
            return False
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def replied(self) -> bool:
        return bool(select.select([self.sock], [], [], 0)[0])

    def drip(self, data: bytes, every_s: float, until_s: float) -> None:
        """A byte at a time, `every_s` apart, for at most `until_s` or until answered."""
        for byte in data:
            if time.monotonic() - self.opened > until_s or not self.send(bytes([byte])):
                return
            time.sleep(every_s)  # the attack itself: a slow client, not a wait for a result

    def answer(self) -> tuple[int, dict[str, str]]:
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            received += chunk
        head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        status = int(head[0].split()[1]) if head[0] else 0
        headers = dict(line.lower().split(": ", 1) for line in head[1:] if ": " in line)
        return status, headers

    def closed_within(self, seconds: float) -> bool:
        """Whether the server ends the connection within `seconds`, whatever was still unread."""
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                self.sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not self.sock.recv(65536):
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return False

    def elapsed(self) -> float:
        return time.monotonic() - self.opened

    def close(self) -> None:
        self.sock.close()
