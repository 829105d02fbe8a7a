"""A captured exchange as the record that is written: redacted, cut, as JSON.

Owns what a capture record says (docs: `[endpoints.NAME.capture]`) and what
it never says. Pure: `Exchange` is what the request path hands over (raw),
`Redaction` the endpoint's rules, and `capture_record` the record, built
off the request path (on the capture writer's thread), before it leaves
the proxy process.

Never recorded: the values of `Authorization`, `Proxy-Authorization`,
`Cookie`, `Set-Cookie` and every `header:NAME` rule (replaced by
"[redacted]"); the keys of `json:$.a.b` rules in JSON bodies, request's and
response's (replaced the same way; a key along the path that holds a list
applies the rest of the path to each element); with any `json:` rule, a
body that is not JSON (withheld whole, since no rule could be checked on
it); the query string (it often carries keys). Bodies are cut at
`max_body_bytes` after redaction, and the record says so. A streamed answer
or a WebSocket is recorded with its chunks or messages counted (`Flow`) and
its start kept up to `max_body_bytes`; shadow copies' answers ride in their
primary's record (`ShadowAnswer`), redacted by the same rules, their
comparison as JSON paths and types, never values.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any

from vocabulary.spec.endpoints import CaptureConfig
from vocabulary.request_path.wire import WireRequest, split_root_path

__all__ = ["Exchange", "Flow", "ShadowAnswer", "Redaction", "capture_record", "REDACTED", "ALWAYS_REDACTED"]

REDACTED = "[redacted]"
ALWAYS_REDACTED = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True)
class Redaction:
    headers: frozenset[str]
    json_paths: tuple[tuple[str, ...], ...]
    max_body_bytes: int

    @classmethod
    def of(cls, config: CaptureConfig) -> Redaction:
        headers, paths = set(ALWAYS_REDACTED), []
        for rule in config.redact:
            kind, _, target = rule.partition(":")
            if kind == "header":
                headers.add(target.lower())
            else:
                paths.append(tuple(target.split(".")[1:]))  # "$.a.b" -> ("a", "b")
        return cls(frozenset(headers), tuple(paths), config.max_body_bytes)

    def header_values(self, headers: Headers) -> list[list[str]]:
        shown = []
        for name, value in headers:
            text = name.decode("latin-1").lower()
            shown.append([text, REDACTED if text in self.headers else value.decode("latin-1")])
        return shown

    def body(self, body: bytes, whole: int | None = None) -> dict[str, Any]:
        """The body as a record holds it: text (or base64), cut, with its size before the cut;
        `whole`: the size of the body `body` is the start of (a stream's, a message's)."""
        if whole is not None and whole > len(body):
            prefix = self.body(body)  # a prefix: JSON rules withhold it unless it is whole JSON
            return {**prefix, "bytes": whole, "truncated": True}
        if self.json_paths and body:
            try:
                document = json.loads(body)
            except ValueError:
                return {"withheld": "not JSON, and the endpoint redacts JSON keys", "bytes": len(body)}
            for path in self.json_paths:
                _redact(document, path)
            body = json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
        cut = body[: self.max_body_bytes]
        shown: dict[str, Any] = {"bytes": len(body), "truncated": len(cut) < len(body)}
        try:
            shown["text"] = cut.decode()
        except UnicodeDecodeError:
            shown["base64"] = base64.b64encode(cut).decode()
        return shown


def _redact(node: Any, path: tuple[str, ...]) -> None:
    if isinstance(node, list):
        for item in node:
            _redact(item, path)
        return
    if not isinstance(node, dict) or path[0] not in node:
        return
    if len(path) == 1:
        node[path[0]] = REDACTED
    else:
        _redact(node[path[0]], path[1:])


@dataclass
class Flow:
    """What went one way through a stream or a WebSocket: counted whole, its start
    kept up to `limit` bytes (each piece with its whole size), raw until the record."""

    limit: int
    count: int = 0
    size: int = 0  # bytes, all of them
    kept: list[tuple[bytes, int]] = field(default_factory=list)
    _room: int = -1

    def add(self, data: bytes) -> None:
        self.count += 1
        self.size += len(data)
        if self._room < 0:
            self._room = self.limit
        if self._room > 0:
            piece = data[: self._room]
            self.kept.append((piece, len(data)))
            self._room -= len(piece)

    def shown(self, rules: Redaction, messages: bool) -> dict[str, Any]:
        """Counts and bytes, and the kept start: one body (a stream's chunks joined) or each message."""
        if messages:
            return {"messages": self.count, "bytes": self.size,
                    "first": [rules.body(piece, whole) for piece, whole in self.kept]}
        return {"chunks": self.count, "bytes": self.size}


@dataclass
class ShadowAnswer:
    """A shadow copy's answer (or what became of it) and, when the endpoint compares, the verdict."""

    backend: str
    result: str  # ok, error, timeout (proxy.observability.metrics' ShadowResult)
    response: tuple[int, Headers, bytes] | None = None
    matched: bool | None = None  # None: not compared
    diff: str = ""  # where they differ: JSON paths and types, never values


@dataclass
class Exchange:
    """One sampled request and its answer, raw, as the request path hands it over."""

    endpoint: str
    backend: str
    request: WireRequest
    started_at: float  # seconds since the epoch
    redaction: Redaction
    sink: str  # the directory records go to
    rollout_step: int = 0  # the progressive rollout's 1-based step that chose the backend (0: none)
    replica: str = ""
    commit: str | None = None
    trace_id: str | None = None
    status: int = 0
    latency_s: float = 0.0
    response_headers: Headers | None = None
    response_body: bytes = b""
    kind: str = "http"  # "http", "stream" (a streamed answer) or "websocket"
    stream: Flow | None = None  # a streamed answer's chunks, its head's included
    client: Flow | None = None  # a WebSocket's messages from the client
    app: Flow | None = None  # a WebSocket's messages from the app
    shadows: list[ShadowAnswer] = field(default_factory=list)
    # The primary's record waits for its shadows' answers (`proxy.app`): copies still out, and whether it was answered.
    shadows_out: int = 0
    answered: bool = False


def _trace_id(headers: Headers) -> str | None:
    for name, value in headers:
        if name == b"traceparent":
            parts = value.decode("latin-1").split("-")
            return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None
    return None


def capture_record(exchange: Exchange, worker: str) -> dict[str, Any]:
    """The record of `exchange`, redacted and cut, as `gitops capture` reads it."""
    method, path, _query, headers, body = exchange.request
    headers, _root = split_root_path(headers)
    rules = exchange.redaction
    record: dict[str, Any] = {
        "time": datetime.fromtimestamp(exchange.started_at, UTC).isoformat(timespec="milliseconds"),
        "endpoint": exchange.endpoint,
        "backend": exchange.backend,
        "replica": exchange.replica,
        "commit": exchange.commit,
        "rollout_step": exchange.rollout_step,
        "trace_id": exchange.trace_id or _trace_id(headers),
        "worker": worker,
        "status": exchange.status,
        "latency_ms": round(exchange.latency_s * 1000, 3),
        "request": {"method": method, "path": path, "headers": rules.header_values(headers), "body": rules.body(body)},
        "kind": exchange.kind,
        "response": {
            "headers": rules.header_values(exchange.response_headers or []),
            "body": rules.body(exchange.response_body),
        },
    }
    if exchange.stream is not None:
        joined = b"".join(piece for piece, _ in exchange.stream.kept)
        record["response"]["body"] = rules.body(joined, exchange.stream.size)
        record["stream"] = exchange.stream.shown(rules, messages=False)
    if exchange.client is not None and exchange.app is not None:
        record["websocket"] = {"client": exchange.client.shown(rules, True), "app": exchange.app.shown(rules, True)}
    if exchange.shadows:
        record["shadows"] = [_shadow(answer, rules) for answer in exchange.shadows]
    return record


def _shadow(answer: ShadowAnswer, rules: Redaction) -> dict[str, Any]:
    shown: dict[str, Any] = {"backend": answer.backend, "result": answer.result}
    if answer.response is not None:
        status, headers, body = answer.response
        shown |= {"status": status, "headers": rules.header_values(headers), "body": rules.body(body)}
    if answer.matched is not None:
        shown["compared"] = {"matched": answer.matched, "diff": answer.diff}
    return shown
