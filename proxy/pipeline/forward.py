"""Forwarding a formed request: its one call to the replica pool, under its deadline, its failures as answers.

Owns the step between a request's `formed` hooks and its answer, for the
HTTP path (`proxy.app`) and the `Sender` the gRPC ingress shares with it:

- the deadline: the endpoint's `timeout_s`, shortened by the client's
  `X-Request-Timeout` (`client_timeout`: 400 when it is no number of
  seconds), counted from when its route was resolved and never past
  `timeout_s`; one that passed before a replica was called is answered 504
  without a call, and what is left of it travels with each replica call
  (`proxy.pool.sending`), so the replica's code and its handle calls see it;
- the call: one `Sender.send` (a slot, waiting in the bounded queue if
  needed; retries on other replicas as the endpoint's `[retries]` policy
  says, `proxy.pool.retrying`), awaited between `RunningCalls.enter` and
  `leave` (`proxy.pipeline.running_calls`: past the deadline the call is
  cancelled, 504; a client that leaves while it runs cancels it, `ClientLeft`, 499);
- its failures as the proxy's answers (`refusal_for`, docs/reference/http.md);
  every 504 for a passed deadline is reported (`Recorder.deadline_exceeded`).

`Forwarding.forward` is the one call: the replica's answer, or `Held` for a
streamed one (`proxy.pipeline.streaming.answer_stream` relays it). It awaits
the pool call itself, between `enter` and `leave`, with no task, timer or
coroutine of its own around it; being itself a coroutine the app awaits, it
costs a noop GET 600 to 1,300 of its some 222,000 instructions (0.3-0.6%,
`bench.proxy_cost` under callgrind, four interleaved runs), within the noise
of its CPU time and of `bench.proxy`. Every report looks the proxy's
recorder up when it is made: a recorder need only have what its proxy uses,
and a test may swap it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Callable

from httpedge.asgi import Receive
from proxy.pipeline.running_calls import RunningCalls
from proxy.pipeline.transit import Refusal, Transit, refusal_for
from proxy.pool.calling import Caller
from proxy.pool.sending import Held, NoTimeLeft, SendError, Sender
from vocabulary.request_path.choosing import Random
from vocabulary.request_path.deadlines import BadTimeout, capped, parse_timeout
from vocabulary.request_path.wire import WireResponse

if TYPE_CHECKING:
    from proxy.pipeline.stages.count import Recorder

__all__ = ["Forwarding", "client_timeout"]


class Forwarding:
    """One event loop's replica calls: each request's one call to its backend's pool, under its deadline."""

    __slots__ = ("sender", "retry_after", "_calls", "_recorder")

    def __init__(
        self, caller: Caller, rng: Random, retry_after: list[tuple[bytes, bytes]], recorder: Callable[[], Recorder],
        calls: RunningCalls,
    ) -> None:
        """`retry_after`: the header a 503 carries; `recorder`: the proxy's recorder, looked up at each report;
        `calls`: the loop's running calls, whose sweep holds each call to its deadline and watches its client."""
        self.retry_after = retry_after
        self._recorder = recorder
        self._calls = calls
        self.sender = Sender(
            caller, lambda backend: recorder().replica_stalled(backend),
            lambda backend, model, loaded, evicted: recorder().model_served(backend, model, loaded, evicted),
            lambda backend, outcome: recorder().retried(backend, outcome),
            lambda backend: recorder().retry_budget_spent(backend),
            rng,
            lambda backend, ejection: recorder().replica_ejected(backend),
            lambda backend, limit: recorder().circuit_open(backend, limit),
        )

    async def forward(self, transit: Transit, receive: Receive, client_s: float | None) -> WireResponse | Held:
        """The answer to `transit`'s formed request from a replica of its backend, or `Held` for a streamed
        one; raises `Refusal` for a failure and `ClientLeft` when its client (read with `receive`) left.
        `client_s`: the seconds the client's own deadline allows (None: the endpoint's timeout alone)."""
        served, request = transit.served, transit.request
        assert request is not None
        seen = None if transit.traced is None and transit.captured is None else transit.seen
        if client_s is None:
            running = self._calls.enter(receive, served.timeout_s)
        else:  # the client's deadline, counted from its route, never past the endpoint's timeout
            left_s = capped(client_s, served.timeout_s) - (time.perf_counter() - transit.started)
            if left_s <= 0:
                self._recorder().deadline_exceeded(served.name, "not-started")
                raise refusal_for(NoTimeLeft(started=False), self.retry_after)
            running = self._calls.enter(receive, left_s)
        try:
            return await self.sender.send(
                transit.snapshot.pools.get(transit.backend), request, running.deadline_at, served.retries, seen,
                served.outliers, served.circuit, client_s is not None, client_s is not None and client_s < served.timeout_s,
            )
        except asyncio.CancelledError:
            instead = self._calls.why_cancelled(running)
            if instead is None:
                raise
            if isinstance(instead, TimeoutError):
                self._recorder().deadline_exceeded(served.name, "expired")
                raise Refusal(504, "Gateway Timeout") from None
            raise instead from None
        except SendError as error:
            if isinstance(error, NoTimeLeft):
                self._recorder().deadline_exceeded(served.name, "expired" if error.started else "not-started")
            raise refusal_for(error, self.retry_after) from None
        finally:
            self._calls.leave(running)


def client_timeout(value: bytes) -> float:
    """The seconds the client's X-Request-Timeout allows; 400 with the reason when it is no number of them."""
    try:
        return parse_timeout(value)
    except BadTimeout as bad:
        raise Refusal(400, str(bad)) from None
