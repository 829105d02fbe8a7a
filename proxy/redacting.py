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
`max_body_bytes` after redaction, and the record says so.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any

from vocabulary.configs import CaptureConfig
from vocabulary.wire import WireRequest, split_root_path

__all__ = ["Exchange", "Redaction", "capture_record", "REDACTED", "ALWAYS_REDACTED"]

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

    def body(self, body: bytes) -> dict[str, Any]:
        """The body as a record holds it: text (or base64), cut, with its size before the cut."""
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
    return {
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
        "response": {
            "headers": rules.header_values(exchange.response_headers or []),
            "body": rules.body(exchange.response_body),
        },
    }
