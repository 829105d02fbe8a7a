"""A steady load on loopback: keep-alive clients that count every answer.

Owns sending the same request at a paced rate from several clients, each on
its own keep-alive connection (as a browser or a service mesh would), and
classifying every request that did not get a 200: the status a proxy made
up, a refused or reset connection, a timeout. The clients run on an asyncio
loop in a thread of their own, so a test can kill things while the load runs.
Must not: decide what a scenario expects; `LoadReport` is plain numbers.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

__all__ = ["FailureKind", "LoadReport", "SteadyLoad", "classify"]


class FailureKind(str, enum.Enum):
    STATUS = "status"  # an answer, but not 200 (the code is kept apart)
    REFUSED = "refused"  # nothing listened on the port
    RESET = "reset"  # the connection closed under the request
    TIMEOUT = "timeout"  # no answer within the client's timeout
    OTHER = "other"


def classify(error: Exception) -> FailureKind:
    """The kind of a failed request's exception, as a user's client meets it."""
    if isinstance(error, httpx.TimeoutException):
        return FailureKind.TIMEOUT
    if isinstance(error, httpx.ConnectError):
        return FailureKind.REFUSED if _caused_by(error, ConnectionRefusedError) else FailureKind.OTHER
    if isinstance(error, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        return FailureKind.RESET
    return FailureKind.OTHER


def _caused_by(error: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True)
class Failure:
    at: float  # time.monotonic()
    kind: FailureKind
    detail: str  # the status code, or the exception's text


@dataclass
class LoadReport:
    requests: int = 0
    failures: list[Failure] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    started: float = 0.0
    ended: float = 0.0

    @property
    def failed(self) -> int:
        return len(self.failures)

    def by_kind(self) -> dict[str, int]:
        return dict(Counter(f.kind.value for f in self.failures))

    def failed_with(self, status: int) -> int:
        return sum(1 for f in self.failures if f.kind is FailureKind.STATUS and f.detail == str(status))

    def failure_window_s(self) -> float:
        """From the first failed request to the last (0 when none failed)."""
        if not self.failures:
            return 0.0
        return self.failures[-1].at - self.failures[0].at

    def summary(self) -> str:
        sample = "; ".join(f"{f.kind.value} {f.detail}" for f in self.failures[:5])
        return f"{self.requests} requests, {self.failed} failed {self.by_kind()} {sample}"


class SteadyLoad:
    """`clients` keep-alive connections, each sending GET `url` every `period_s`.

    Use as a context manager or call `start()` and `stop()`; `stop()` returns
    the report. `successes_since(t)` lets a test wait for service to resume.
    """

    def __init__(self, url: str, clients: int = 8, period_s: float = 0.04, timeout_s: float = 15.0) -> None:
        self.url = url
        self._clients = clients
        self._period_s = period_s
        self._timeout_s = timeout_s
        self._report = LoadReport()
        self._last_ok = 0.0
        self._successes: list[tuple[float, float]] = []  # (sent, answered) of every 200
        self._lock = threading.Lock()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    def __enter__(self) -> SteadyLoad:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._thread is not None:
            self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="steady-load", daemon=True)
        self._thread.start()
        if not self._running.wait(10):
            raise RuntimeError("the load generator did not start")

    def stop(self) -> LoadReport:
        assert self._loop is not None and self._stop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(self._timeout_s + 10)
        self._thread = None
        with self._lock:
            return self._report

    def snapshot(self) -> tuple[int, int]:
        """(requests, failed) so far."""
        with self._lock:
            return self._report.requests, self._report.failed

    def last_success(self) -> float:
        """time.monotonic() of the newest 200, 0.0 before the first."""
        with self._lock:
            return self._last_ok

    def first_answered_after(self, since: float) -> float | None:
        """When the first request sent after `since` got its 200 (None: not yet).

        A request already in flight at `since` does not count: it says nothing
        about whether a new client is served.
        """
        with self._lock:
            answered = [done for sent, done in self._successes if sent > since]
        return min(answered) if answered else None

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._report.started = time.monotonic()
        self._running.set()
        await asyncio.gather(*(self._client(i) for i in range(self._clients)))
        self._report.ended = time.monotonic()

    async def _client(self, index: int) -> None:
        assert self._stop is not None
        # One connection per client, kept alive between requests.
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=self._timeout_s, limits=limits) as client:
            # Spread the clients over one period so the load is steady, not bursty.
            await asyncio.sleep(self._period_s * index / self._clients)
            while not self._stop.is_set():
                began = time.monotonic()
                await self._one(client)
                pause = self._period_s - (time.monotonic() - began)
                if pause > 0:
                    try:
                        await asyncio.wait_for(self._stop.wait(), pause)
                    except TimeoutError:
                        pass

    async def _one(self, client: httpx.AsyncClient) -> None:
        sent = time.monotonic()
        failure: Failure | None = None
        status = 0
        try:
            response = await client.get(self.url)
            status = response.status_code
            if status != 200:
                failure = Failure(time.monotonic(), FailureKind.STATUS, str(status))
        except httpx.HTTPError as error:
            failure = Failure(time.monotonic(), classify(error), f"{type(error).__name__}: {error}")
        with self._lock:
            self._report.requests += 1
            if status:
                self._report.statuses[status] += 1
            if failure is None:
                self._last_ok = time.monotonic()
                self._successes.append((sent, self._last_ok))
            else:
                self._report.failures.append(failure)
