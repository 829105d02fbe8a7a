"""The proxy's HTTP/1.1 server (`httpedge.server`) against a tiny ASGI app, over real sockets on 127.0.0.1.

What a client meets: connection reuse, pipelined answers in order, request
bodies in either framing, streamed answers, HEAD, HTTP/1.0 and `Connection:
close`, 100-continue, a gone client seen by the app, garbage and hostile
clients answered at the edge, WebSocket hand-over and graceful shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import pytest
from websockets.asyncio.client import connect as ws_connect

from httpedge.limits import EdgeLimits
from httpedge.server import Server

Message = dict[str, Any]
FAST = EdgeLimits(header_timeout_s=0.5, max_header_bytes=4096, max_connections=3, keep_alive_s=5.0)


class App:
    """Echoes method, path, query and body; `/slow` answers after a while, `/stream` in chunks,
    `/wait` waits for the client to leave, `/boom` raises, `/split` sends a header with a line break."""

    def __init__(self) -> None:
        self.bodies: list[list[Message]] = []
        self.disconnected = asyncio.Event()
        self.released = asyncio.Event()
        self.chunks_sent = 0

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "websocket":
            await self.websocket(receive, send)
            return
        path = scope["path"]
        if path == "/late-body":
            await self.released.wait()
        messages = [await receive()]
        while messages[-1].get("more_body"):
            messages.append(await receive())
        self.bodies.append(messages)
        body = b"".join(m.get("body", b"") for m in messages)
        if path == "/slow":
            await asyncio.sleep(0.2)
        if path == "/boom":
            raise ValueError("the app failed")
        if path == "/wait":
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected.set()
            return
        if path == "/split":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"x-evil", b"a\r\nset-cookie: stolen=1")]})
            await send({"type": "http.response.body", "body": b"x"})
            return
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            for part in (b"one ", b"two ", b"three"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if path == "/big":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for _ in range(64):
                await send({"type": "http.response.body", "body": b"x" * (1024 * 1024), "more_body": True})
                self.chunks_sent += 1
            await send({"type": "http.response.body", "body": b""})
            return
        if path == "/big-stream":  # chunks above the size written beside their framing, the last one too
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"a", b"b", b"c"):
                await send({"type": "http.response.body", "body": part * (100 * 1024), "more_body": True})
            await send({"type": "http.response.body", "body": b"d" * (100 * 1024)})
            return
        if path == "/empty":
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        answer = b"%s %s?%s %s" % (scope["method"].encode(), scope["raw_path"], scope["query_string"], body)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": answer})

    async def websocket(self, receive: Callable[[], Awaitable[Message]],
                        send: Callable[[Message], Awaitable[None]]) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            await send({"type": "websocket.send", "text": "echo: " + message["text"]})


@contextlib.asynccontextmanager
async def serving(app: App, limits: EdgeLimits = FAST) -> AsyncIterator[tuple[Server, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = Server(app, limits, websockets=True)
    task = asyncio.ensure_future(server.serve([sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield server, sock.getsockname()[1]
    finally:
        await server.shutdown(1.0)
        await task


class Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def answer(self, head_only: bool = False) -> tuple[int, dict[str, str], bytes]:
        """One response: status, headers (lower-case names), body (de-chunked)."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, value = line.split(": ", 1)
                assert name.lower() not in headers, f"{name} twice"
                headers[name.lower()] = value
        if head_only or status in (100, 204, 304):
            return status, headers, b""
        if "content-length" in headers:
            return status, headers, await self.reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int((await self.reader.readuntil(b"\r\n"))[:-2], 16)
                chunk = await self.reader.readexactly(size + 2)
                if size == 0:
                    return status, headers, body
                body += chunk[:-2]
        return status, headers, await self.reader.read()

    async def closed(self) -> bool:
        """True once the server closed the connection (nothing more to read)."""
        return await asyncio.wait_for(self.reader.read(), 5) == b""

    def close(self) -> None:
        self.writer.close()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]  # the scenario's coroutine


GET = b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n"


def test_a_connection_is_reused_for_the_next_request() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            for path in (b"/a", b"/b?x=1"):
                conn.send(GET % path)
                status, headers, body = await conn.answer()
                assert status == 200 and headers["content-length"] == str(len(body))
                assert body == b"GET " + path.split(b"?")[0] + b"?" + (path.split(b"?") + [b""])[1] + b" "
                assert "date" in headers and "server" not in headers and "connection" not in headers
            conn.close()

    run(scenario)


def test_connections_send_small_writes_at_once_whatever_the_listening_sockets_protocol() -> None:
    async def scenario() -> None:
        async with serving(App()) as (server, port):  # bound as socket.socket(): proto 0, like the proxy's
            conn = await Conn.open(port)
            conn.send(GET % b"/a")
            await conn.answer()
            (connection,) = server.connections
            sock = connection.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)  # no Nagle wait on a streamed chunk
            conn.close()

    run(scenario)


def test_a_keep_alive_connection_is_closed_once_idle_for_keep_alive_s_and_not_while_in_use() -> None:
    async def scenario() -> None:
        limits = EdgeLimits(header_timeout_s=0.2, keep_alive_s=0.3)
        async with serving(App(), limits) as (_, port):
            conn = await Conn.open(port)
            for _ in range(6):  # in use for longer than either deadline
                conn.send(GET % b"/a")
                assert (await conn.answer())[0] == 200
                await asyncio.sleep(0.1)
            idle_from = time.monotonic()
            assert await conn.closed()
            assert time.monotonic() - idle_from < limits.keep_alive_s + 2

    run(scenario)


def test_pipelined_requests_are_answered_in_order_even_when_the_first_is_slowest() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(GET % b"/slow" + GET % b"/a" + b"POST /b HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz" + GET % b"/c")
            bodies = [(await conn.answer())[2] for _ in range(4)]
            assert bodies == [b"GET /slow? ", b"GET /a? ", b"POST /b? xyz", b"GET /c? "]
            conn.close()

    run(scenario)


def test_a_chunked_request_body_reaches_the_app_in_messages_with_more_body() -> None:
    async def scenario() -> None:
        app = App()
        async with serving(app) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"POST /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await conn.writer.drain()
            await asyncio.sleep(0.05)
            conn.send(b"3\r\ndef\r\n0\r\n\r\n")
            assert (await conn.answer())[2] == b"POST /up? abcdef"
            messages = app.bodies[0]
            assert messages[0]["more_body"] is True and messages[-1]["more_body"] is False
            assert all(m["type"] == "http.request" for m in messages)
            conn.close()

    run(scenario)


def test_a_large_body_the_app_does_not_read_pauses_reading_then_arrives_whole() -> None:
    async def scenario() -> None:
        app = App()
        async with serving(app) as (server, port):
            conn = await Conn.open(port)
            body = b"b" * (1024 * 1024)
            conn.send(b"POST /late-body HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            for _ in range(200):
                if any(c.read_paused for c in server.connections):
                    break
                await asyncio.sleep(0.01)
            assert any(c.read_paused for c in server.connections)
            app.released.set()
            status, _, answer = await conn.answer()
            assert status == 200 and answer == b"POST /late-body? " + body
            conn.close()

    run(scenario)


def test_a_streamed_answer_is_chunked_and_the_connection_stays_usable() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(GET % b"/stream")
            status, headers, body = await conn.answer()
            assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
            assert body == b"one two three"
            conn.send(GET % b"/after")
            assert (await conn.answer())[2] == b"GET /after? "
            conn.close()

    run(scenario)


def test_large_answers_arrive_byte_exact_in_either_framing_and_the_connection_stays_usable() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(GET % b"/big-stream")
            _, headers, body = await conn.answer()
            assert headers["transfer-encoding"] == "chunked"
            assert body == b"".join(part * (100 * 1024) for part in (b"a", b"b", b"c", b"d"))
            posted = bytes(range(256)) * 1024
            conn.send(b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(posted) + posted)
            _, headers, body = await conn.answer()
            assert int(headers["content-length"]) == len(body) and body == b"POST /echo? " + posted
            conn.send(b"HEAD /echo HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await conn.answer(head_only=True))[0] == 200
            conn.send(GET % b"/after")
            assert (await conn.answer())[2] == b"GET /after? "
            conn.close()

    run(scenario)


def test_head_and_204_answers_carry_no_body() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"HEAD /a HTTP/1.1\r\n\r\n" + GET % b"/empty" + GET % b"/b")
            status, headers, _ = await conn.answer(head_only=True)
            assert status == 200 and "transfer-encoding" not in headers
            status, headers, _ = await conn.answer()
            assert status == 204 and "content-length" not in headers and "transfer-encoding" not in headers
            assert (await conn.answer())[2] == b"GET /b? "  # nothing of a body came in between
            conn.close()

    run(scenario)


@pytest.mark.parametrize("request_bytes", [
    b"GET /a HTTP/1.0\r\n\r\n",
    b"GET /a HTTP/1.1\r\nConnection: close\r\n\r\n",
])
def test_http_1_0_and_connection_close_are_answered_then_closed(request_bytes: bytes) -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(request_bytes)
            status, headers, body = await conn.answer()
            assert status == 200 and headers["connection"] == "close" and body == b"GET /a? "
            assert await conn.closed()

    run(scenario)


def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"POST /up HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
            assert (await conn.answer())[0] == 100
            conn.send(b"data")
            assert (await conn.answer())[2] == b"POST /up? data"
            conn.close()

    run(scenario)


def test_a_client_that_leaves_is_an_http_disconnect_for_the_app() -> None:
    async def scenario() -> None:
        app = App()
        async with serving(app) as (_, port):
            conn = await Conn.open(port)
            conn.send(GET % b"/wait")
            while not app.bodies:
                await asyncio.sleep(0.01)
            conn.close()
            await asyncio.wait_for(app.disconnected.wait(), 5)

    run(scenario)


def test_an_app_that_raises_is_500_and_a_header_with_a_line_break_never_goes_out() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            for path in (b"/boom", b"/split"):
                conn = await Conn.open(port)
                conn.send(GET % path)
                status, headers, _ = await conn.answer()
                assert status == 500 and "set-cookie" not in headers and "x-evil" not in headers
                conn.close()

    run(scenario)


def test_a_client_that_does_not_read_holds_the_app_back() -> None:
    async def scenario() -> None:
        app = App()
        async with serving(app) as (_, port):
            conn = await Conn.open(port)
            conn.send(GET % b"/big")
            await asyncio.sleep(0.3)
            assert app.chunks_sent < 64  # send() waits on the full write buffer
            _, _, body = await conn.answer()
            assert len(body) == 64 * 1024 * 1024
            conn.close()

    run(scenario)


def test_garbage_is_400_and_closes_the_connection() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"NOT HTTP AT ALL\r\n\r\n")
            status, headers, body = await conn.answer()
            assert status == 400 and headers["connection"] == "close" and body == b"Invalid HTTP request received."
            assert await conn.closed()

    run(scenario)


def test_a_header_above_the_limit_is_431_cut_off_long_before_its_end() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"GET /a HTTP/1.1\r\nX-Big: ")
            sent = 0
            with contextlib.suppress(ConnectionError):
                while sent < 64 * 1024 * 1024 and not conn.reader.at_eof() and not conn.reader._buffer:  # noqa: SLF001  # the stream reader's buffer tells when the server stopped reading
                    conn.send(b"a" * 65536)
                    await conn.writer.drain()
                    sent += 65536
            status, headers, _ = await conn.answer()
            assert status == 431 and headers["connection"] == "close"
            assert sent < 8 * 1024 * 1024
            conn.close()

    run(scenario)


def test_a_header_that_fits_the_packet_but_not_the_limit_is_431() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            conn = await Conn.open(port)
            conn.send(b"GET /a HTTP/1.1\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
            assert (await conn.answer())[0] == 431

    run(scenario)


def test_an_idle_connection_and_a_dripped_header_are_408_at_the_deadline() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            idle, dripping = await Conn.open(port), await Conn.open(port)
            opened = time.monotonic()

            async def drip() -> None:
                with contextlib.suppress(ConnectionError):
                    for byte in b"GET /a HTTP/1.1\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n":
                        if dripping.reader.at_eof() or dripping.reader._buffer:  # noqa: SLF001  # the stream reader's buffer tells when the server stopped reading
                            return
                        dripping.send(bytes([byte]))
                        await asyncio.sleep(0.05)  # the attack itself: a slow client

            dripper = asyncio.ensure_future(drip())
            assert (await idle.answer())[0] == 408
            assert (await dripping.answer())[0] == 408
            assert time.monotonic() - opened < FAST.header_timeout_s + 2
            await dripper

    run(scenario)


def test_a_connection_past_the_cap_is_503_with_retry_after() -> None:
    async def scenario() -> None:
        app = App()
        async with serving(app) as (_, port):
            holders = [await Conn.open(port) for _ in range(FAST.max_connections)]
            for holder in holders:
                holder.send(GET % b"/a")
                assert (await holder.answer())[0] == 200  # served, and kept open
            extra = await Conn.open(port)
            extra.send(b"POST /never HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            status, headers, _ = await extra.answer()
            assert status == 503 and headers["retry-after"] == "1" and headers["connection"] == "close"
            assert len(app.bodies) == FAST.max_connections  # the app never saw it
            for conn in holders:
                conn.close()

    run(scenario)


def test_a_websocket_is_handed_to_the_apps_websocket_scope() -> None:
    async def scenario() -> None:
        async with serving(App()) as (_, port):
            async with ws_connect(f"ws://127.0.0.1:{port}/chat") as websocket:
                await websocket.send("hello")
                assert await websocket.recv() == "echo: hello"

    run(scenario)


def test_shutdown_lets_the_answer_in_flight_finish_and_closes_idle_connections() -> None:
    async def scenario() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        server = Server(App(), FAST)
        serve = asyncio.ensure_future(server.serve([sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        idle, busy = await Conn.open(port), await Conn.open(port)
        idle.send(GET % b"/a")
        await idle.answer()
        busy.send(GET % b"/slow")
        await asyncio.sleep(0.05)
        await server.shutdown(5.0)
        status, headers, body = await busy.answer()
        assert status == 200 and body == b"GET /slow? " and headers["connection"] == "close"
        assert await idle.closed()
        await serve
        with pytest.raises(OSError):
            await Conn.open(port)

    run(scenario)
