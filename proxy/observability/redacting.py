"""A captured exchange as the record that is written: redacted, cut, as JSON.

Owns what a capture record says (docs: `[endpoints.NAME.capture]`) and what
it never says. Pure: `Exchange` is what the request path hands over (raw),
`Redaction` the endpoint's rules, and `capture_record` the record, built
off the request path (on the capture writer's thread), before it leaves
the proxy process.

Never recorded: the values of every credential-looking header
(`credential_like`: `Authorization`, `Cookie`, `X-Api-Key`, `X-Auth`, any
name with auth, key, token, secret, password, session, credential or cookie
in it) and of every `header:NAME` rule (replaced by "[redacted]"); the query
and fragment of `Referer`, `Location` and `Content-Location`; the keys of
`json:$.a.b` rules in JSON bodies, request's and response's (replaced the
same way; a key along the path that holds a list applies the rest of the
path to each element); with any `json:` rule, a body that is not JSON, or
larger than `PARSED_MAX_BYTES`, or nested deeper than `PARSED_MAX_DEPTH`
(withheld whole, never parsed past the bound: no rule could be checked on
it); the query string (it often carries keys). Bodies are cut at
`max_body_bytes` after redaction, and the record says so; each side's
headers are kept up to `max_body_bytes` too (names and values), the rest
counted in `headers_cut`. A streamed answer
or a WebSocket is recorded with its chunks or messages counted (`Flow`) and
its start kept up to `max_body_bytes`; a gRPC call (`grpc`) with its service,
method and status code, its metadata as the request's headers, its request
message as the body and its reply message (a streamed reply: its messages,
as a WebSocket's) as the answer's; shadow copies' answers ride in their
primary's record (`ShadowAnswer`), redacted by the same rules, their
comparison as JSON paths and types, never values.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, UTC
from typing import Any

from proxy.observability.bodies import EMPTY, BodyView
from vocabulary.spec.endpoints import CaptureConfig
from vocabulary.request_path.grpc_calls import GRPC_HEADER, STATUS_HEADER, code_name, method_of, service_of
from vocabulary.request_path.wire import WireRequest, split_root_path

__all__ = [
    "Exchange", "Flow", "ShadowAnswer", "Redaction", "capture_record", "credential_like", "REDACTED",
    "ALWAYS_REDACTED", "PARSED_MAX_BYTES", "PARSED_MAX_DEPTH", "kept", "needed", "too_deep",
]

REDACTED = "[redacted]"
ALWAYS_REDACTED = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
# A header name with one of these in it (lower case, `_` read as `-`) is a credential's.
CREDENTIAL_PARTS = ("auth", "key", "token", "secret", "password", "passwd", "session", "credential", "cookie")
QUERY_REDACTED = frozenset({"referer", "location", "content-location"})  # URLs: their query and fragment go
PARSED_MAX_BYTES = 1 << 20  # a larger body is withheld under `json:` rules, never parsed
PARSED_MAX_DEPTH = 64  # so is one nested deeper than this (checked before parsing)
Headers = list[tuple[bytes, bytes]]

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_LEAVES = re.compile(rb"\[\]|\{\}")


def credential_like(name: str | bytes) -> bool:
    """Whether a header named `name` carries a credential, by its name: `X-Api_Key`, `x-auth`, `Cookie`..."""
    text = (name.decode("latin-1") if isinstance(name, bytes) else name).lower().replace("_", "-")
    return any(part in text for part in CREDENTIAL_PARTS)


def too_deep(body: bytes, depth: int = PARSED_MAX_DEPTH) -> bool:
    """Whether `body`'s brackets (outside strings) nest deeper than `depth`, or do not pair up:
    each pass removes the innermost pairs, in C, so the check never recurses."""
    brackets = _STRINGS.sub(b"", body).translate(None, _NOT_BRACKETS)
    for _ in range(depth):
        if not brackets:
            return False
        shorter = _LEAVES.sub(b"", brackets)
        if len(shorter) == len(brackets):
            return True  # unpaired: no JSON
        brackets = shorter
    return bool(brackets)


def _without_query(value: str) -> str:
    cut = min((i for i in (value.find("?"), value.find("#")) if i >= 0), default=-1)
    return value if cut < 0 else value[:cut] + "?" + REDACTED


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

    def header_values(self, headers: Headers) -> dict[str, Any]:
        """`{"headers": [[name, value], ...]}`, redacted, kept up to `max_body_bytes` (names and
        values), and, when some did not fit, `headers_cut`: how many and their bytes."""
        shown, room, cut, cut_bytes = [], self.max_body_bytes, 0, 0
        for name, value in headers:
            text = name.decode("latin-1").lower()
            if text in self.headers or credential_like(text):
                kept = REDACTED
            elif text in QUERY_REDACTED:
                kept = _without_query(value.decode("latin-1"))
            else:
                kept = value.decode("latin-1")
            size = len(text) + len(kept)
            if size > room:
                cut, cut_bytes, room = cut + 1, cut_bytes + len(name) + len(value), 0
                continue
            room -= size
            shown.append([text, kept])
        fields: dict[str, Any] = {"headers": shown}
        if cut:
            fields["headers_cut"] = {"headers": cut, "bytes": cut_bytes}
        return fields

    def body(self, body: bytes | BodyView, whole: int | None = None) -> dict[str, Any]:
        """The body as a record holds it: text (or base64), cut, with its size before the cut;
        `whole`: the size of the body `body` is the start of (a stream's, a message's). Read
        through its view: one buffer is made only of what the record shows (the cut, at most
        `max_body_bytes`) and, with `json:` rules, of the body parsed (at most `PARSED_MAX_BYTES`)."""
        view = BodyView.of(body)
        if whole is not None and whole > len(view):
            if self.json_paths and whole > PARSED_MAX_BYTES:
                return {"withheld": f"larger than the {PARSED_MAX_BYTES} bytes parsed for redaction", "bytes": whole}
            prefix = self.body(view)  # a prefix: JSON rules withhold it unless it is whole JSON
            return {**prefix, "bytes": whole, "truncated": True}
        size = len(view)
        if self.json_paths and view:
            parsed = view.whole(PARSED_MAX_BYTES)  # its one piece, or a bounded copy of its pieces
            if parsed is None:
                return {"withheld": f"larger than the {PARSED_MAX_BYTES} bytes parsed for redaction", "bytes": size}
            if too_deep(parsed):
                return {"withheld": f"nested deeper than the {PARSED_MAX_DEPTH} levels parsed for redaction",
                        "bytes": size}
            try:
                document = json.loads(parsed)
            except ValueError:
                return {"withheld": "not JSON, and the endpoint redacts JSON keys", "bytes": size}
            for path in self.json_paths:
                _redact(document, path)
            view = BodyView.one(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
            size = len(view)
        cut = view.prefix(self.max_body_bytes)  # the record's own copy, at most max_body_bytes
        shown: dict[str, Any] = {"bytes": size, "truncated": len(cut) < size}
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

    def start(self) -> BodyView:
        """The kept start, as one body: a view of the pieces as they went (a stream's chunks)."""
        return BodyView(piece for piece, _ in self.kept)

    def shown(self, rules: Redaction, messages: bool) -> dict[str, Any]:
        """Counts and bytes, and the kept start: one body (a stream's chunks) or each message."""
        if messages:
            return {"messages": self.count, "bytes": self.size,
                    "first": [rules.body(piece, whole) for piece, whole in self.kept]}
        return {"chunks": self.count, "bytes": self.size}


@dataclass
class ShadowAnswer:
    """A shadow copy's answer (or what became of it) and, when the endpoint compares, the verdict."""

    backend: str
    result: str  # ok, error, timeout (proxy.observability.metrics' ShadowResult)
    response: tuple[int, Headers, bytes | BodyView] | None = None
    matched: bool | None = None  # None: not compared
    body_bytes: int | None = None  # the answer's whole size when `response` holds only its start
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
    response_body: BodyView = EMPTY  # the answer's body as the client was sent it: a view, not a copy
    kind: str = "http"  # "http", "stream" (a streamed answer), "websocket" or "grpc" (a gRPC call)
    stream: Flow | None = None  # a streamed answer's chunks, its head's included (a gRPC call's: its reply messages)
    client: Flow | None = None  # a WebSocket's messages from the client (a gRPC call's streamed requests)
    app: Flow | None = None  # a WebSocket's messages from the app
    shadows: list[ShadowAnswer] = field(default_factory=list)
    # The bodies' whole sizes once the writer's queue holds only what the record needs of them (`kept`).
    request_bytes: int | None = None
    response_bytes: int | None = None
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
    grpc = exchange.kind == "grpc"
    if grpc and headers and headers[-1][0] == GRPC_HEADER:
        headers = headers[:-1]  # the ingress's marker, no metadata of the client's
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
        "request": {
            "method": method, "path": path, **rules.header_values(headers),
            "body": rules.body(body, exchange.request_bytes),
        },
        "kind": exchange.kind,
        "response": {
            **rules.header_values(exchange.response_headers or []),
            "body": rules.body(exchange.response_body, exchange.response_bytes),
        },
    }
    if grpc:
        record["grpc"] = _grpc_call(path, exchange.response_headers or [])
        if exchange.stream is not None:  # a streamed reply: its messages, counted, the first ones kept
            record["stream"] = exchange.stream.shown(rules, messages=True)
        if exchange.client is not None:  # streamed requests: the same, the other way
            record["requests"] = exchange.client.shown(rules, messages=True)
    elif exchange.stream is not None:
        record["response"]["body"] = rules.body(exchange.stream.start(), exchange.stream.size)
        record["stream"] = exchange.stream.shown(rules, messages=False)
    if exchange.client is not None and exchange.app is not None:
        record["websocket"] = {"client": exchange.client.shown(rules, True), "app": exchange.app.shown(rules, True)}
    if exchange.shadows:
        record["shadows"] = [_shadow(answer, rules) for answer in exchange.shadows]
    return record


def _grpc_call(path: str, trailers: Headers) -> dict[str, Any]:
    """A gRPC call's service, method and the status code it ended with (its `grpc-status` trailer)."""
    code = next((int(value) for name, value in trailers if name == STATUS_HEADER and value.isdigit()), None)
    shown: dict[str, Any] = {"service": service_of(path), "method": method_of(path), "code": code}
    if code is not None:
        shown["code_name"] = code_name(code)
    return shown


def _shadow(answer: ShadowAnswer, rules: Redaction) -> dict[str, Any]:
    shown: dict[str, Any] = {"backend": answer.backend, "result": answer.result}
    if answer.response is not None:
        status, headers, body = answer.response
        shown |= {"status": status, **rules.header_values(headers), "body": rules.body(body, answer.body_bytes)}
    if answer.matched is not None:
        shown["compared"] = {"matched": answer.matched, "diff": answer.diff}
    return shown


def needed(rules: Redaction, body: bytes | BodyView) -> BodyView:
    """What a record can show of `body`: its start up to `max_body_bytes` (without `json:`
    rules: a copy of at most that, so that the queue does not hold the whole answer), the whole
    (with them, up to `PARSED_MAX_BYTES`: the same pieces, uncopied), or nothing (past that: withheld)."""
    view = BodyView.of(body)
    if rules.json_paths:
        return view if len(view) <= PARSED_MAX_BYTES else EMPTY
    return view if len(view) <= rules.max_body_bytes else BodyView.one(view.prefix(rules.max_body_bytes))


def kept(exchange: Exchange) -> int:
    """Cut `exchange`'s bodies to what its record needs (their whole sizes kept beside them), so
    that a queued record holds at most about `PARSED_MAX_BYTES` a body; its size in bytes, about."""
    rules = exchange.redaction
    method, path, query, headers, body = exchange.request
    cut = needed(rules, body)
    if len(cut) < len(body):
        exchange.request, exchange.request_bytes = (method, path, query, headers, cut.prefix(len(cut))), len(body)
    start = needed(rules, exchange.response_body)
    if len(start) < len(exchange.response_body):
        exchange.response_body, exchange.response_bytes = start, len(exchange.response_body)
    size = 512 + len(start) + len(exchange.request[4]) + _headers_size(headers)
    size += _headers_size(exchange.response_headers or [])
    for answer in exchange.shadows:
        if answer.response is not None:
            status, answer_headers, answer_body = answer.response
            start = needed(rules, answer_body)
            if len(start) < len(answer_body):
                answer.response, answer.body_bytes = (status, answer_headers, start), len(answer_body)
            size += 256 + len(start) + _headers_size(answer_headers)
    for flow in (exchange.stream, exchange.client, exchange.app):
        if flow is not None:
            size += sum(64 + len(piece) for piece, _ in flow.kept)
    return size


def _headers_size(headers: Headers) -> int:
    return sum(64 + len(name) + len(value) for name, value in headers)
