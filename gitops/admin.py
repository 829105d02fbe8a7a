"""The agent's admin HTTP API: status, history, metrics, verbs and the webhook.

Owns the routes of PRODUCT.md "Agent admin API" and how they map onto the
agent: `GET /` (the status page), `GET /status`, `GET /history`,
`GET /metrics`, `GET /healthz`, `POST /sync`, `/suspend`, `/resume`, and `POST /hooks/git`, which only
wakes the agent to fetch (the payload is never read for specs) and only
with a valid GitHub-style signature. Serving (uvicorn on the agent's event
loop) is `server`. Must not: reconcile or touch git; it only asks the agent.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from gitops.history import HistoryEntry
from gitops.status import AgentStatus
from gitops.statuspage import render_page
from gitops.webhooks import MAX_BODY_BYTES, SIGNATURE_HEADER, RateLimiter, Verdict, verify

__all__ = ["AdminTarget", "WebhookGuard", "build_app", "server"]

_HISTORY_LIMIT_MAX = 1000


class AdminTarget(Protocol):
    """What the admin API needs from the agent (`gitops.agent.Agent` has it)."""

    @property
    def suspended(self) -> bool: ...

    def status(self) -> AgentStatus: ...

    def history(self, limit: int = 50) -> list[HistoryEntry]: ...

    def suspend(self) -> None: ...

    def resume(self) -> None: ...


@dataclass
class WebhookGuard:
    """The webhook's secret, body limit and rate limit; absent means the webhook is off."""

    secret: bytes
    limiter: RateLimiter = field(default_factory=RateLimiter)
    max_body: int = MAX_BODY_BYTES
    clock: Callable[[], float] = time.monotonic


def build_app(
    agent: AdminTarget,
    *,
    sync: Callable[[], None],
    webhook_fetch: Callable[[], None],
    metrics: Callable[[], tuple[bytes, str]],
    webhook: WebhookGuard | None = None,
    commit_url_template: str | None = None,
) -> Starlette:
    """The admin app; `sync` and `webhook_fetch` wake the agent."""

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    async def status(request: Request) -> Response:
        return JSONResponse(agent.status().model_dump(mode="json"))

    async def history(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "50"))
        except ValueError:
            return _error(400, "limit must be an integer")
        limit = max(1, min(limit, _HISTORY_LIMIT_MAX))
        return JSONResponse({"entries": [entry.to_json() for entry in agent.history(limit)]})

    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics()
        return Response(body, media_type=content_type)

    async def do_sync(request: Request) -> Response:
        if agent.suspended:
            return _error(409, "reconciliation is suspended; resume it first")
        sync()
        return JSONResponse({"accepted": True}, status_code=202)

    async def do_suspend(request: Request) -> Response:
        agent.suspend()
        return JSONResponse({"status": agent.status().status.value})

    async def do_resume(request: Request) -> Response:
        agent.resume()
        return JSONResponse({"status": agent.status().status.value})

    async def hook(request: Request) -> Response:
        if webhook is None:
            return _error(404, "the webhook is off (start the agent with --webhook-secret-file)")
        return await _hook(request, webhook, webhook_fetch)

    routes = [
        Route("/healthz", healthz),
        Route("/status", status),
        Route("/history", history),
        Route("/metrics", metrics_page),
        Route("/sync", do_sync, methods=["POST"]),
        Route("/suspend", do_suspend, methods=["POST"]),
        Route("/resume", do_resume, methods=["POST"]),
        Route("/hooks/git", hook, methods=["POST"]),
    ]
    async def status_page(request: Request) -> Response:
        return HTMLResponse(render_page(commit_url_template=commit_url_template))

    routes.append(Route("/", status_page))
    return Starlette(routes=routes)


async def _hook(request: Request, guard: WebhookGuard, fetch: Callable[[], None]) -> Response:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > guard.max_body:
        return _error(413, f"body larger than {guard.max_body} bytes")
    body = await _read_limited(request, guard.max_body)
    if body is None:
        return _error(413, f"body larger than {guard.max_body} bytes")
    verdict = verify(guard.secret, body, request.headers.get(SIGNATURE_HEADER))
    if verdict is Verdict.MISSING:
        return _error(401, f"missing {SIGNATURE_HEADER}")
    if verdict is Verdict.INVALID:
        return _error(403, f"{SIGNATURE_HEADER} does not match")
    if not guard.limiter.allow(guard.clock()):
        retry = max(1, round(guard.limiter.retry_after()))
        return _error(429, "too many webhook calls", headers={"Retry-After": str(retry)})
    fetch()
    return JSONResponse({"accepted": True}, status_code=202)


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The body, or None once it exceeds `limit` (chunked bodies have no length)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except ClientDisconnect:
        return b""
    return b"".join(chunks)


def _error(code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=code, headers=headers)


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: `gitops run` owns Ctrl-C / SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server(app: Starlette, host: str, port: int) -> uvicorn.Server:
    """A quiet uvicorn server to `await server.serve()` on the agent's loop."""
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off")
    return _Server(config)
