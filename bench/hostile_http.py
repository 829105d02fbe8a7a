"""Hostile HTTP clients: the RSS of the process they aim at, before and after (issue 27 rows 1, 2 and 4).

- row 1, a trailer flood: a chunked body, then trailer lines as fast as the
  listener takes them (at most 200 MB or 5 s), once to a path answered early
  and once to one whose app reads the body;
- row 2, dripped bodies after early answers: 64 connections each POST a
  1 MB body to an unrouted path and drip it; how many are still open after
  the linger, and whether a request on a new connection is served;
- row 4, a WebSocket flood: 1 MiB messages into a replica (the shipped
  `notes` chat) that the client does not read the echoes of, for at most
  300 messages or 10 s (the replica's byte budget is the data path's).

Rows 1 and 2 run against the real proxy (a Ray actor on a local Ray of this
process's own) and against the agent's admin listener (`gitops.admin.api.server`
in a process of its own, with the webhook); row 4 against the proxy and its
replica. Prints one line per case; no assertions (the bounds are asserted in
tests/security/test_hostile_http.py). Under a minute:

    python -m bench.hostile_http [--no-ray]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import machine  # noqa: E402

MB = 1_000_000
MIB = 1024 * 1024


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def answered(sock: socket.socket) -> bool:
    return bool(select.select([sock], [], [], 0)[0])


def status_of(sock: socket.socket) -> int:
    try:
        sock.settimeout(5)
        head = sock.recv(65536)
    except OSError:
        return 0
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


# --- the attacks -------------------------------------------------------------------


def trailer_flood(port: int, path: str) -> str:
    sock = connect(port)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n".encode())
    block = (b"X-Flood: " + b"a" * 1000 + b"\r\n") * 64
    sent, started = 0, time.monotonic()
    try:
        while sent < 200 * MB and time.monotonic() - started < 5 and not answered(sock):
            sock.sendall(block)
            sent += len(block)
    except OSError:
        pass
    status = status_of(sock)
    sock.close()
    return f"{sent / MB:6.1f} MB of trailers taken, answered {status or 'nothing'}"


def dripped_bodies(port: int, path: str, connections: int, then: Callable[[int], int]) -> str:
    drippers = []
    for _ in range(connections):
        sock = connect(port)
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {MB}\r\n\r\n".encode() + b"x")
        drippers.append(sock)
    deadline = time.monotonic() + 5  # the linger is 2 s
    while time.monotonic() < deadline:
        for sock in drippers:
            with contextlib.suppress(OSError):
                sock.send(b"x")  # the attack: a body a byte at a time
                if answered(sock):
                    sock.recv(65536)
        time.sleep(0.2)
    still_open = 0
    for sock in drippers:
        try:
            sock.send(b"x")
            time.sleep(0.01)
            sock.send(b"x")
            still_open += 1
        except OSError:
            pass
        sock.close()
    return f"{still_open} of {connections} still open after 5 s; a new request: {then(port)}"


def a_plain_request(path: str) -> Callable[[int], int]:
    def ask(port: int) -> int:
        with contextlib.closing(connect(port)) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            return status_of(sock)

    return ask


def websocket_flood(url: str) -> str:
    from websockets.exceptions import ConnectionClosed, WebSocketException
    from websockets.sync.client import connect as ws_connect

    message = "m" * MIB
    sent, started = 0, time.monotonic()
    with ws_connect(url, open_timeout=10, close_timeout=1, max_size=None) as ws:
        ws.recv(timeout=10)  # the greeting
        try:
            while sent < 300 and time.monotonic() - started < 10:
                ws.send(message)  # the echoes are never read
                sent += 1
        except (OSError, TimeoutError, WebSocketException) as error:
            why = f"{type(error).__name__}: {error}"
            if isinstance(error, ConnectionClosed) and error.rcvd is not None:
                why = f"closed {error.rcvd.code} {error.rcvd.reason}".strip()
            return f"{sent} MiB sent in {time.monotonic() - started:.1f} s, then {why}"
    return f"{sent} MiB sent in {time.monotonic() - started:.1f} s"


def case(label: str, pid: int, attack: Callable[[], str]) -> None:
    before = rss_mb(pid)
    outcome = attack()
    time.sleep(0.5)
    print(f"{label:<58} RSS {before:6.1f} -> {rss_mb(pid):6.1f} MB  {outcome}", flush=True)


# --- the admin listener, in a process of its own -------------------------------------


def serve_admin(port: int) -> None:
    from gitops.admin.api import WebhookGuard, build_app, server
    from tests.component.test_admin import SECRET, FakeAgent

    app = build_app(FakeAgent(), sync=lambda: None, webhook_fetch=lambda: None, metrics=lambda: (b"", "text/plain"),
                    webhook=WebhookGuard(SECRET))
    asyncio.run(server(app, "127.0.0.1", port).serve())


@contextlib.contextmanager
def admin_listener() -> Iterator[tuple[int, int]]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.hostile_http", "--serve-admin", str(port)],
                               cwd=Path(__file__).resolve().parents[1])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), contextlib.closing(connect(port)):
                break
            time.sleep(0.05)
        yield process.pid, port
    finally:
        process.terminate()
        process.wait(10)


def signed_push(port: int) -> int:
    from gitops.admin.webhooks import sign
    from tests.component.test_admin import BODY, SECRET

    with contextlib.closing(connect(port)) as sock:
        sock.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Hub-Signature-256: " + sign(SECRET, BODY).encode()
                     + b"\r\nX-GitHub-Delivery: " + uuid.uuid4().hex.encode()
                     + b"\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
        return status_of(sock)


# --- the proxy and a replica, on a Ray of our own ---------------------------------


@contextlib.contextmanager
def proxy_stack() -> Iterator[str]:
    from controller.cluster import init_ray, shutdown_ray
    from tests.support.examples import serve_shipped_examples

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RAY_ADDRESS"] = "local"  # a Ray of our own, never another user's
        namespace = f"bench-hostile-{uuid.uuid4().hex[:6]}"
        init_ray(address=None, namespace=namespace, state_dir=Path(tmp) / "ray-state")
        try:
            examples = serve_shipped_examples(namespace, Path(tmp))
            served = next(examples)
            served.backend("notes", "notes")
            served.shipped_endpoint("notes")
            try:
                yield served.url
            finally:
                next(examples, None)  # the rest of the fixture body: the controller's shutdown
        finally:
            shutdown_ray()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-ray", action="store_true", help="the admin listener only")
    parser.add_argument("--serve-admin", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_admin:
        serve_admin(args.serve_admin)
        return 0
    print(f"{'case':<58} {'memory':<25} outcome")
    with admin_listener() as (pid, port):
        case("admin: row 1, trailer flood, /nowhere (answered early)", pid, lambda: trailer_flood(port, "/nowhere"))
        case("admin: row 1, trailer flood, /hooks/git (body read)", pid, lambda: trailer_flood(port, "/hooks/git"))
        case("admin: row 2, 64 dripped bodies after a 404", pid,
             lambda: dripped_bodies(port, "/nowhere", 64, signed_push))
    if args.no_ray:
        return 0
    with proxy_stack() as url:
        port = int(url.rsplit(":", 1)[1])
        [proxy] = machine.find(os.getpid(), "ray::ProxyActor")[:1]
        [replica] = machine.find(os.getpid(), "ray::Replica")[:1]
        case("proxy: row 1, trailer flood, /nowhere (answered early)", proxy, lambda: trailer_flood(port, "/nowhere"))
        case("proxy: row 1, trailer flood, /notes/ (body read)", proxy, lambda: trailer_flood(port, "/notes/"))
        case("proxy: row 2, 64 dripped bodies after a 404", proxy,
             lambda: dripped_bodies(port, "/nowhere", 64, a_plain_request("/-/healthz")))
        case("replica: row 4, 1 MiB WebSocket messages, echoes unread", replica,
             lambda: websocket_flood(url.replace("http://", "ws://") + "/notes/chat"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
