"""Delivery: the one I/O part of notifications, and why it cannot slow the agent.

`Notifier.observe(outcome)` is what the agent calls at the end of a tick:
it derives the events (`events_for`), formats each provider's request and
appends it to that provider's bounded queue, and returns; it never waits.
`Notifier.run()` is a task beside the reconcile loop with one worker per
provider, so a slow or hanging receiver delays only its own messages;
`drain()` gives queued messages a bounded time to go out at shutdown. A
worker sends with a timeout and retries transport errors, 408, 429 and 5xx
with exponential backoff and jitter; a full queue drops its oldest message
and counts it. Each end (success, failure, dropped) goes to `on_result`
(the `gitops_notifications_total` counter); the last failure per provider is
kept for status.

Secrets: a failure is described only by an HTTP status or an exception's
type name, never by the exception's text or the URL (a Slack webhook URL is
its credential). Must not: decide which events exist (`events`) or what a
request looks like (`formats`).
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import httpx

from gitops.notifications.config import Channel
from gitops.notifications.events import Event, EventKind, TickOutcome, events_for
from gitops.notifications.formats import Context, Request, request_for

__all__ = ["Attempt", "DeliveryResult", "Failure", "RetryPolicy", "HttpSender", "Notifier", "Send"]

_LOG = logging.getLogger("gitops.notifications")
_RETRY_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class Attempt:
    """How one send went: an HTTP status, or a transport error's type name."""

    status: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status in _RETRY_STATUSES or self.status >= 500

    def __str__(self) -> str:
        return f"HTTP {self.status}" if self.status is not None else str(self.error)


Send = Callable[[Request], Awaitable[Attempt]]


class DeliveryResult(str, enum.Enum):
    SUCCESS = "success"
    FAILURE = "failure"  # given up after the last retry, or refused (4xx)
    DROPPED = "dropped"  # pushed out of a full queue


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    base_s: float = 1.0
    cap_s: float = 60.0

    def delay(self, retry: int, draw: float) -> float:
        """Before retry number `retry` (0-based): half of the exponential step
        fixed, half drawn, so many agents do not retry in step."""
        step = min(self.cap_s, self.base_s * 2**retry)
        return step / 2 + draw * step / 2


class HttpSender:
    """POSTs a request with httpx; one connection pool for every provider."""

    def __init__(self, timeout_s: float = 10.0) -> None:
        self._client = httpx.AsyncClient(timeout=timeout_s, follow_redirects=False)

    async def __call__(self, request: Request) -> Attempt:
        try:
            response = await self._client.post(request.url, content=request.body, headers=list(request.headers))
        except httpx.HTTPError as error:
            return Attempt(error=type(error).__name__)  # its text may hold the URL
        return Attempt(status=response.status_code)

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class Failure:
    """The last message a provider did not take; no URL, header or body in it."""

    at: float
    event: EventKind
    commit: str | None
    error: str  # "HTTP 502" or a transport error's type name

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "event": self.event.value, "commit": self.commit, "error": self.error}


@dataclass
class _ChannelState:
    channel: Channel
    queue: collections.deque[tuple[Event, Request]]
    ready: asyncio.Event  # set when something is queued
    idle: asyncio.Event  # set while nothing is queued or being sent
    delivered: int = 0
    failed: int = 0
    dropped: int = 0
    dropping: bool = False  # since the queue last ran empty; one warning per episode
    last_failure: Failure | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.channel.provider.type,
            "delivered": self.delivered,
            "failed": self.failed,
            "dropped": self.dropped,
            "queued": len(self.queue),
            "last_failure": self.last_failure.to_json() if self.last_failure else None,
        }


class Notifier:
    def __init__(
        self,
        channels: Sequence[Channel],
        context: Context,
        *,
        send: Send,
        on_result: Callable[[str, str], None] = lambda provider, result: None,
        queue_size: int = 100,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        draw: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.time,
        log: logging.Logger = _LOG,
    ) -> None:
        self._context = context
        self._send = send
        self._on_result = on_result
        self._retry = retry
        self._sleep = sleep
        self._draw = draw
        self._clock = clock
        self._log = log
        self._channels = [
            _ChannelState(channel, collections.deque(maxlen=queue_size), asyncio.Event(), asyncio.Event())
            for channel in channels
        ]
        for state in self._channels:
            state.idle.set()
        self._previous: TickOutcome | None = None

    # --- the agent's side: never waits ------------------------------------------

    def observe(self, outcome: TickOutcome) -> None:
        """Announce what this tick changed since the last one."""
        events = events_for(self._previous, outcome)
        self._previous = outcome
        for event in events:
            self.publish(event)

    def publish(self, event: Event) -> None:
        for state in self._channels:
            if not state.channel.provider.wants(event.kind):
                continue
            request = request_for(state.channel.provider, event, self._context)
            if request is None:
                continue
            if len(state.queue) == state.queue.maxlen:
                self._drop_oldest(state)
            state.queue.append((event, request))
            state.idle.clear()
            state.ready.set()

    def _drop_oldest(self, state: _ChannelState) -> None:
        """The deque drops it on append; count it, and warn once until the queue drains."""
        state.dropped += 1
        self._on_result(state.channel.name, DeliveryResult.DROPPED.value)
        if not state.dropping:
            state.dropping = True
            self._log.warning(
                f"notifications: {state.channel.name}: queue full, dropping the oldest messages",
                extra={"provider": state.channel.name, "result": "dropped"},
            )

    def health(self) -> dict[str, dict[str, Any]]:
        """Per provider: counts and the last failure (no secret in it)."""
        return {state.channel.name: state.to_json() for state in self._channels}

    # --- the delivery task ---------------------------------------------------------

    async def run(self) -> None:
        """Deliver until cancelled, one worker per provider."""
        await asyncio.gather(*(self._work(state) for state in self._channels))

    async def drain(self, timeout_s: float) -> None:
        """At shutdown: give what is queued up to `timeout_s` to go out."""
        waits = [asyncio.create_task(state.idle.wait()) for state in self._channels]
        _, pending = await asyncio.wait(waits, timeout=timeout_s)
        for wait in pending:
            wait.cancel()

    async def _work(self, state: _ChannelState) -> None:
        while True:
            while not state.queue:
                state.dropping = False
                state.idle.set()
                state.ready.clear()
                await state.ready.wait()
            event, request = state.queue.popleft()
            await self._deliver(state, event, request)

    async def _deliver(self, state: _ChannelState, event: Event, request: Request) -> None:
        attempt = Attempt(error="not sent")
        for retry in range(self._retry.attempts):
            if retry:
                await self._sleep(self._retry.delay(retry - 1, self._draw()))
            attempt = await self._send(request)
            if attempt.ok:
                state.delivered += 1
                self._on_result(state.channel.name, DeliveryResult.SUCCESS.value)
                return
            if not attempt.retryable:
                break
        state.failed += 1
        state.last_failure = Failure(self._clock(), event.kind, event.commit, str(attempt))
        self._on_result(state.channel.name, DeliveryResult.FAILURE.value)
        self._log.warning(
            f"notifications: {state.channel.name}: {event.kind.value} not delivered ({attempt})",
            extra={"provider": state.channel.name, "result": "failure"},
        )
