"""The soak's mixed load through the real proxy: plain requests, streams, WebSocket sessions
and handle calls, each client on its own keep-alive connection, until stopped.

Owns sending the four kinds of traffic of `bench.soak_plan.Traffic` at a
steady pace from an asyncio loop in a thread of its own (so the harness can
inject faults meanwhile), checking each answer in full (a stream has all its
events, a session gets every echo), and recording every one that did not
end as it should as a `soak_plan.Failure`, timed from `origin`.
Must not: decide whether a failure is explained (`soak_plan.explain` does).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from bench.soak_plan import Failure, Traffic
from tests.support.load import FailureKind, classify

__all__ = ["MixedLoad", "STREAM_EVENTS", "SESSION_MESSAGES"]

STREAM_EVENTS = 5
SESSION_MESSAGES = 5
CLIENT_TIMEOUT_S = 20.0
# Clients per traffic kind and the pause between one's requests: about 40
# requests a second in all, steady on two shared cores. Client i sends to
# proxy i % len(base_urls): every kind reaches every node of a two-node cluster.
CLIENTS = {Traffic.PLAIN: (4, 0.13), Traffic.HANDLE: (2, 0.15), Traffic.STREAM: (2, 0.4), Traffic.WEBSOCKET: (2, 1.0)}


class _Cut(Exception):
    """A stream or session that ended before its last event or echo."""


class MixedLoad:
    def __init__(self, base_urls: list[str], origin: float) -> None:
        self.base_urls = base_urls  # a proxy's, one per node
        self.origin = origin
        self.requests: Counter[str] = Counter()
        self.failures: list[Failure] = []
        self._lock = threading.Lock()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="soak-load", daemon=True)
        self._thread.start()
        if not self._running.wait(10):
            raise RuntimeError("the load generator did not start")

    def stop(self) -> None:
        assert self._loop is not None and self._stop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(CLIENT_TIMEOUT_S + 15)

    def snapshot(self) -> tuple[dict[str, int], list[Failure]]:
        with self._lock:
            return dict(self.requests), list(self.failures)

    def _now(self) -> float:
        return round(time.monotonic() - self.origin, 3)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._running.set()
        clients = [
            self._client(traffic, self.base_urls[index % len(self.base_urls)], index, count, pause)
            for traffic, (count, pause) in CLIENTS.items() for index in range(count)
        ]
        await asyncio.gather(*clients)

    async def _client(self, traffic: Traffic, base_url: str, index: int, count: int, pause_s: float) -> None:
        assert self._stop is not None
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT_S, limits=limits) as client:
            await asyncio.sleep(pause_s * index / count)
            while not self._stop.is_set():
                began = time.monotonic()
                await self._one(traffic, base_url, client)
                rest = pause_s - (time.monotonic() - began)
                if rest > 0:
                    try:
                        await asyncio.wait_for(self._stop.wait(), rest)
                    except TimeoutError:
                        pass

    async def _one(self, traffic: Traffic, base_url: str, client: httpx.AsyncClient) -> None:
        sent = self._now()
        failure: tuple[str, str] | None = None
        try:
            if traffic is Traffic.WEBSOCKET:
                await asyncio.wait_for(self._session(base_url.replace("http://", "ws://", 1)), CLIENT_TIMEOUT_S)
            elif traffic is Traffic.STREAM:
                await self._stream(base_url, client)
            else:
                path = "/plain" if traffic is Traffic.PLAIN else "/relay"
                response = await client.get(base_url + path)
                if response.status_code != 200:
                    failure = (f"status {response.status_code}", response.text[:200])
        except _Cut as cut:
            failure = ("cut", str(cut))
        except InvalidStatus as refused:
            failure = (f"status {refused.response.status_code}", str(refused))
        except ConnectionClosed as closed:
            failure = ("cut", f"closed {closed.rcvd.code if closed.rcvd else 'without a close frame'}")
        except TimeoutError:
            failure = ("timeout", "no answer within the client's timeout")
        except httpx.HTTPError as error:
            failure = (classify(error).value, f"{type(error).__name__}: {error}")
        except ConnectionRefusedError as error:
            failure = (FailureKind.REFUSED.value, str(error))
        except (OSError, WebSocketException) as error:
            failure = (FailureKind.RESET.value, f"{type(error).__name__}: {error}")
        with self._lock:
            self.requests[traffic.value] += 1
            if failure is not None:
                self.failures.append(Failure(traffic, sent, self._now(), failure[0], failure[1]))

    async def _stream(self, base_url: str, client: httpx.AsyncClient) -> None:
        async with client.stream("GET", f"{base_url}/relay/stream?count={STREAM_EVENTS}") as response:
            if response.status_code != 200:
                raise _Cut(f"status {response.status_code}")
            body = b""
            try:
                async for chunk in response.aiter_bytes():
                    body += chunk
            except httpx.HTTPError as error:  # closed mid-body: how the proxy ends a broken stream
                raise _Cut(f"broke after {body.count(b'data: ')} events: {type(error).__name__}: {error}") from None
        events = body.count(b"data: ")
        if events != STREAM_EVENTS:
            raise _Cut(f"{events} of {STREAM_EVENTS} events")

    async def _session(self, ws_url: str) -> None:
        async with connect(ws_url + "/chat/ws", open_timeout=CLIENT_TIMEOUT_S, close_timeout=5) as socket:
            greeting = await socket.recv()
            if "hello" not in str(greeting):
                raise _Cut(f"greeting {greeting!r}")
            for n in range(SESSION_MESSAGES):
                await socket.send(f"m{n}")
                echo = await socket.recv()
                if echo != f"echo: m{n}":
                    raise _Cut(f"echo {echo!r}")
                await asyncio.sleep(0.05)
