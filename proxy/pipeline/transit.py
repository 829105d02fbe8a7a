"""A request in transit through the pipeline, and the proxy-made answers that end one early.

`Transit` is what the stages of one request share (`proxy.pipeline.stage`):
the endpoint it resolved to, the backend chosen for it, the wire request once
formed, and what the stages that are on keep about it (its span, its capture
record, the future its shadow copies compare with, its token debit, what
watches its streamed answer's chunks). Allocated once per
request; a stage that is off never touches it.

`Refusal` ends a request with an answer of the proxy's own (a status code of
docs/reference/http.md and a line of text, or a body of its own; `refusal_for`
a replica call's failure). `send_answer` writes a whole answer;
`end_to_end` drops hop-by-hop headers (both ways).
Pure: values and the ASGI `send` it is given.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from httpedge.asgi import Scope, Send
from vocabulary.request_path.wire import WireRequest

from proxy.pool.circuit import Limit
from proxy.pool.sending import (
    CircuitOpen, NoBackend, NoReplica, NoTimeLeft, QueueFull, ReplicaDied, ReplicaStalled, SendError, UnknownModel,
)

if TYPE_CHECKING:
    from proxy.observability.redacting import Exchange
    from proxy.observability.shadow_compare import Answer
    from proxy.observability.tracing import Traced
    from proxy.pool.sending import Held
    from proxy.routes.token_budgets import UsageWatch
    from proxy.routes.snapshot import ServedEndpoint, Snapshot

__all__ = ["Transit", "Debit", "Refusal", "refusal_for", "send_answer", "end_to_end", "TEXT", "CLOSE", "CLIENT_LEFT"]

TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
CLOSE = [(b"connection", b"close")]
CLIENT_LEFT = 499  # nginx's code for a client that closed the connection first
_NOT_STARTED = "Gateway Timeout: the request's deadline passed before a replica was called"
# RFC 9110 7.6.1: meaningful for one connection only, never forwarded.
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"te", b"trailer", b"transfer-encoding", b"upgrade"}
)


class Refusal(Exception):
    """Ends a request early with a proxy-made answer."""

    def __init__(
        self, status: int, text: str, headers: list[tuple[bytes, bytes]] | None = None, body: bytes | None = None,
    ) -> None:
        """`body`: answered instead of `text`, with `headers` (its content type among them)."""
        super().__init__(text)
        self.status = status
        self.text = text
        self.headers = headers or []
        self.body = body

    def answer(self) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The answer's headers and body."""
        if self.body is None:
            return [*TEXT, *self.headers], self.text.encode()
        return self.headers, self.body


class Debit:
    """The tokens a request was admitted on (`proxy.pipeline.stages.budget`), settled once it is answered."""

    __slots__ = ("slot", "tenant", "estimated", "watch")

    def __init__(self, slot: int, tenant: str, estimated: int) -> None:
        self.slot = slot
        self.tenant = tenant  # its metric label
        self.estimated = estimated
        self.watch: UsageWatch | None = None  # a streamed answer's usage, read as its chunks pass


class Transit:
    """One request on its way: what its stages share, from its route to its answer."""

    __slots__ = ("scope", "path", "snapshot", "served", "backend", "started", "request", "traced", "captured",
                 "primary", "held", "duration_s", "debit", "observers")

    def __init__(self, scope: Scope, path: str, snapshot: Snapshot, served: ServedEndpoint, started: float) -> None:
        self.scope = scope
        self.path = path
        self.snapshot = snapshot
        self.served = served
        self.started = started
        self.backend = ""  # chosen by the steering stage
        self.request: WireRequest | None = None  # formed once its body is read
        self.traced: Traced | None = None  # its span, when traced
        self.captured: Exchange | None = None  # its capture record, when captured
        self.primary: asyncio.Future[Answer] | None = None  # what its shadow copies compare with
        self.held: Held | None = None  # a streamed answer's head, with its replica slot
        self.duration_s = 0.0  # from its route to its answer sent (a stream: to its end)
        self.debit: Debit | None = None  # the tokens it was admitted on, when its endpoint has a token budget
        self.observers: list[Callable[[bytes], None]] | None = None  # given each chunk of a streamed answer

    def observe(self, observer: Callable[[bytes], None]) -> None:
        """Have `observer` given each chunk of the streamed answer as it is relayed (its head's first chunk
        excepted: a stage's `streaming` hook reads that one)."""
        if self.observers is None:
            self.observers = []
        self.observers.append(observer)

    def commit(self) -> str | None:
        """The commit the chosen backend's replicas run, as its replica set says."""
        pool = self.snapshot.pools.get(self.backend)
        return None if pool is None else pool.commit

    def seen(self, replica_id: str) -> None:
        """The replica a call of this request went to (its span and its record name it)."""
        if self.traced is not None:
            self.traced.replica = replica_id
        if self.captured is not None:
            self.captured.replica = replica_id


def refusal_for(error: SendError, retry_after: list[tuple[bytes, bytes]]) -> Refusal:
    """What the client is answered when no reply came back from a replica (docs/reference/http.md)."""
    if isinstance(error, NoBackend) or (isinstance(error, NoReplica) and not error.after_stall):
        return Refusal(503, "No replica available", retry_after)
    if isinstance(error, QueueFull):
        return Refusal(503, "Backend queue is full", retry_after)
    if isinstance(error, CircuitOpen):
        held = "requests waiting" if error.limit is Limit.PENDING else "retries in flight"
        return Refusal(503, f"Backend circuit open: too many {held}", retry_after)
    if isinstance(error, (NoReplica, ReplicaStalled)):  # the retry of a call its replica stalled under
        return Refusal(504, "Gateway Timeout: the replica stalled")
    if isinstance(error, NoTimeLeft):
        return Refusal(504, "Gateway Timeout" if error.started else _NOT_STARTED)
    if isinstance(error, UnknownModel):
        return Refusal(400, f"Bad Request: the {error.header} header names no model this backend serves")
    if isinstance(error, ReplicaDied):
        return Refusal(502, "Bad Gateway: the replica died")
    return Refusal(500, "Internal Server Error")  # HandlerFailed


async def send_answer(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def end_to_end(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` without hop-by-hop ones: the fixed set, `Proxy-*`, and any `Connection` names."""
    for name, _ in headers:
        if name in _HOP_BY_HOP or name[:6] == b"proxy-":
            break
    else:
        return headers  # the common case: nothing to drop (names in `Connection` need a `Connection`)
    named = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    return [
        (name, value) for name, value in headers
        if name not in _HOP_BY_HOP and not name.startswith(b"proxy-") and name not in named
    ]
