"""The agent's admin HTTP API: status, history, metrics, verbs and the webhook.

Owns the routes of the admin API and how they map onto the agent: `GET /`
(the status page, drawn for its reader: `gitops.admin.page_view`, with a
Content-Security-Policy and the reader's CSRF token), `GET /events` (its
live updates, `gitops.admin.events`), `GET /plan` (the plan of the
branch's head that waits unapplied: held by a sync window, suspended,
quarantined), `GET /status`, `GET /history[?actor=&kind=]` (the commits' rows, the actions taken
and the replicas proxies ejected as outliers), `GET /metrics`,
`GET /healthz`, `GET /logs/BACKEND[?since=T&cursors=JSON]` (its replicas'
own output, redacted), `GET /traces?commit=SHA` (the agent's kept apply traces),
`GET /audit[?after=ID]` (the audit trail as JSON lines), `POST /sync`,
`/suspend`, `/resume`, `/rollback[?commit=SHA]`, `/rollouts/ENDPOINT/promote`
and `/rollouts/ENDPOINT/abort` (a running rollout, by hand) (each with an optional
`reason=TEXT`, recorded with who asked and from where), and `POST /hooks/git`,
which only wakes the agent to fetch (the payload is never read for specs)
and only with a valid GitHub-style signature, once per delivery. Every
request passes `gitops.admin.auth.access.check` first (token, Host, Origin),
then the role table; a mutating request from a browser (`gitops.admin.auth.csrf.from_browser`)
also needs its page's CSRF token in `X-CSRF-Token` (403 without it).
`build_webhook_app` is `/hooks/git` alone, for its own listener
(`--webhook-port`), so publishing the webhook publishes nothing else.
Serving is `server`: the HTTP edge the proxy uses (`httpedge.server`, its
bounds and answers), on the agent's event loop, with `ADMIN_LIMITS`.
Must not: reconcile or touch git; it only asks the agent.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable, Protocol
from urllib.parse import parse_qsl, urlencode

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from gitops.admin.auth.access import AccessPolicy, Refusal, authenticate, check
from gitops.admin.auth.access import BearerRefused
from gitops.admin.auth.csrf import CsrfKey, from_browser
from gitops.admin.events import EventLimits, EventStreams, frames
from gitops.admin.auth.login import COOKIE, CSRF_HEADER, Logins, challenge_of
from gitops.admin.page_view import (
    PAGE_HEADERS, content_security_policy, filter_ejections, filter_history, offered, plan_lines,
)
from gitops.admin.auth.roles import Principal, refusal, rule_for
from gitops.reconcile.outcomes import MAX_REASON_CHARS, Action, Ejection, HistoryEntry
from gitops.reconcile.plans import PendingPlan
from gitops.redaction import redact
from gitops.reconcile.rollback import Quarantine, RollbackRefused
from gitops.status.rollup import AgentStatus
from gitops.admin.page import PageView, render_page
from gitops.admin.webhooks import (
    DELIVERY_HEADER,
    MAX_BODY_BYTES,
    SIGNATURE_HEADER,
    DeliveryLog,
    RateLimiter,
    Verdict,
    verify,
)
from httpedge.limits import EdgeLimits
from httpedge.asgi import App
from httpedge.server import Server
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput

# `controller.client.ControllerClient.replica_output`: (backend, since, cursors) -> each replica's output.
ReplicaOutputReader = Callable[[str, "float | None", dict[str, OutputCursor]], Awaitable[list[ReplicaOutput]]]

__all__ = [
    "AdminTarget", "AuditTrail", "Listener", "SignIn", "WebhookGuard", "build_app", "build_webhook_app", "server",
    "ADMIN_LIMITS", "requester",
]

# An admin API has a handful of clients: few connections, short deadlines.
ADMIN_LIMITS = EdgeLimits(header_timeout_s=5.0, body_timeout_s=10.0, max_connections=64)
LOOPBACK_POLICY = AccessPolicy.build(None, "127.0.0.1")
EVENT_LIMITS = EventLimits()
_SHUTDOWN_GRACE_S = 5.0  # for answers in flight when the agent stops

_HISTORY_LIMIT_MAX = 1000
_AUDIT_EXPORT_MAX = 100_000  # the actions one /audit answer holds at most; page on with ?after=ID


class AdminTarget(Protocol):
    """What the admin API needs from the agent (`gitops.loop.agent.Agent` has it)."""

    @property
    def suspended(self) -> bool: ...

    def status(self) -> AgentStatus: ...

    def history(self, limit: int = 50) -> list[HistoryEntry]: ...

    def suspend(self) -> None: ...

    def resume(self) -> None: ...

    def rollback(self, commit: str | None = None) -> Quarantine: ...


class SignIn(Protocol):
    """The status page's sign-in: the issuer (`gitops.admin.auth.oidc.OidcVerifier`) and the sessions."""

    logins: Logins
    client_id: str

    async def endpoints(self) -> tuple[str, str]: ...

    async def exchange(self, code: str, verifier: str, redirect_uri: str) -> tuple[Principal, dict[str, Any]]: ...


class AuditTrail(Protocol):
    """Where the admin API records who did what (`gitops.loop.agent.Agent` has it)."""

    def record_action(self, action: Action) -> Action: ...

    def actions(self, limit: int = 50, actor: str | None = None, after: int = 0) -> list[Action]: ...


@dataclass
class WebhookGuard:
    """The webhook's secret, body limit, replay log and rate limit; absent means the webhook is off."""

    secret: bytes
    limiter: RateLimiter = field(default_factory=RateLimiter)
    max_body: int = MAX_BODY_BYTES
    clock: Callable[[], float] = time.monotonic
    deliveries: DeliveryLog = field(default_factory=DeliveryLog)
    body_timeout_s: float = ADMIN_LIMITS.body_timeout_s


def build_app(
    agent: AdminTarget,
    *,
    sync: Callable[[], None],
    webhook_fetch: Callable[[], None],
    metrics: Callable[[], tuple[bytes, str]],
    webhook: WebhookGuard | None = None,
    commit_url_template: str | None = None,
    policy: AccessPolicy = LOOPBACK_POLICY,
    shadow_mismatches: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    replica_output: ReplicaOutputReader | None = None,
    override_window: Callable[[str], None] | None = None,
    apply_traces: Callable[[str], list[Any]] | None = None,
    audit: AuditTrail | None = None,
    sign_in: SignIn | None = None,
    pending_plan: Callable[[], PendingPlan | None] | None = None,
    decide_rollout: Callable[[str, str, str], Awaitable[str]] | None = None,
    events: EventLimits = EVENT_LIMITS,
    csrf: CsrfKey | None = None,
    ejections: Callable[[int], list[Ejection]] | None = None,
    automation: Callable[[], dict[str, Any]] | None = None,
) -> ASGIApp:
    """The admin app behind `policy`; `sync` and `webhook_fetch` wake the agent;
    `shadow_mismatches` gathers the proxies' samples (`gitops.admin.shadow_mismatches`);
    `apply_traces` answers a commit's kept apply traces (`gitops.reconcile.apply_traces.TraceRing`);
    `audit` records every mutating call with who, from where and why, and answers `/audit`;
    `sign_in` is the status page's login at the OIDC issuer (`/login`, `/login/callback`);
    `pending_plan` the plan of the head that waits unapplied, and why (`/plan`, the page's stream);
    `decide_rollout` promotes or aborts a running rollout by hand (endpoint, verb, who);
    `events` bounds the page's live streams; `csrf` makes and checks the page's CSRF tokens;
    `ejections` answers the replicas proxies ejected as outliers, newest first (in `/history`);
    `automation` the last look of each artifact automation, shown in `/status` as `automation`.

    Without `webhook` (no secret, or the webhook on its own listener)
    `/hooks/git` answers 404 here.
    """

    csrf_key = csrf if csrf is not None else CsrfKey()
    streams = EventStreams(events)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    def plan_json() -> dict[str, Any] | None:
        found = pending_plan() if pending_plan is not None else None
        if found is None:
            return None
        return {"commit": found.commit, "why": found.why, "lines": plan_lines(found.text)}

    async def plan(request: Request) -> Response:
        return JSONResponse(plan_json(), headers={"Cache-Control": "no-store"})

    taken: list[Any] = [float("-inf"), None]  # when the last snapshot was taken, and it

    def snapshot() -> dict[str, Any]:
        """What the streams send, taken at most once per poll however many streams look."""
        now = time.monotonic()
        if now - taken[0] >= events.poll_s / 2:
            newest = agent.history(1)
            acted = audit.actions(1) if audit is not None else []
            ejected = ejections(1) if ejections is not None else []
            taken[:] = [now, {"status": agent.status().model_dump(mode="json"), "plan": plan_json(),
                              "history": [newest[0].id if newest else None, acted[0].id if acted else None,
                                          ejected[0].id if ejected else None]}]
        return taken[1]

    async def live(request: Request) -> Response:
        who = requester(request)
        refused = streams.acquire(who)
        if refused is not None:
            retry = str(max(1, round(events.lifetime_s / 10)))
            return _error(503, f"{refused}; the page asks every few seconds instead", {"Retry-After": retry})
        return _EventStream(frames(snapshot, events, closing=lambda: streams.closing), lambda: streams.release(who))

    def page_csrf(request: Request, principal: Principal) -> str:
        """The session's token on a sign-in's session, else one bound to the principal."""
        session = sign_in.logins.session(request.cookies.get(COOKIE)) if sign_in is not None else None
        if session is not None and session.principal is principal:
            return session.csrf
        return csrf_key.token(principal)

    async def status(request: Request) -> Response:
        shown = agent.status().model_dump(mode="json")
        if automation is not None:
            shown["automation"] = automation()
        return JSONResponse(shown)

    async def history(request: Request) -> Response:
        try:
            limit = int(request.query_params.get("limit", "50"))
        except ValueError:
            return _error(400, "limit must be an integer")
        limit = max(1, min(limit, _HISTORY_LIMIT_MAX))
        actor = request.query_params.get("actor") or None
        kind = request.query_params.get("kind") or None
        wide = _HISTORY_LIMIT_MAX if kind is not None else limit  # a kind is picked from more rows
        found = audit.actions(wide, actor) if audit is not None else []
        try:
            entries, actions = filter_history([] if actor is not None else agent.history(wide), found,
                                              actor=actor, kind=kind, limit=limit)
        except ValueError as error:
            return _error(400, str(error))
        ejected = filter_ejections(ejections(limit) if ejections is not None else [], actor=actor, kind=kind,
                                   limit=limit)
        return JSONResponse({"entries": [entry.to_json() for entry in entries],
                             "actions": [action.to_json() for action in actions],
                             "ejections": [ejection.to_json() for ejection in ejected]})

    async def audit_export(request: Request) -> Response:
        """The audit trail as JSON lines, oldest first, after id `after`."""
        try:
            after = int(request.query_params.get("after", "0"))
        except ValueError:
            return _error(400, "after must be an integer (an action's id)")
        found = audit.actions(_AUDIT_EXPORT_MAX, None, after) if audit is not None else []
        body = "".join(json.dumps(action.to_json(), separators=(",", ":")) + "\n" for action in reversed(found))
        return Response(body, media_type="application/x-ndjson")

    def attributed(request: Request, verb: str, detail: str = "", result: str = "accepted") -> None:
        if audit is None:
            return
        principal: Principal | None = getattr(request.state, "principal", None)
        audit.record_action(Action(
            at=time.time(), actor=requester(request), via=principal.via if principal else "loopback",
            peer=request.client.host if request.client else "", verb=verb, detail=detail,
            reason=request.query_params.get("reason", ""), result=result,
        ))

    def bad_reason(request: Request) -> Response | None:
        reason = request.query_params.get("reason", "")
        if len(reason) > MAX_REASON_CHARS:
            return _error(400, f"reason longer than {MAX_REASON_CHARS} characters")
        return None

    async def metrics_page(request: Request) -> Response:
        body, content_type = metrics()
        return Response(body, media_type=content_type)

    async def do_sync(request: Request) -> Response:
        if (refused := bad_reason(request)) is not None:
            return refused
        if agent.suspended:
            return _error(409, "reconciliation is suspended; resume it first")
        if request.query_params.get("override_window") in ("1", "true"):
            if override_window is None:
                return _error(409, "this agent runs without --environment: it has no sync window to override")
            who = requester(request)
            override_window(who)
            attributed(request, "sync", "past any sync window")
            return JSONResponse({"accepted": True, "override_window": True, "by": who}, status_code=202)
        sync()
        attributed(request, "sync")
        return JSONResponse({"accepted": True}, status_code=202)

    async def do_suspend(request: Request) -> Response:
        if (refused := bad_reason(request)) is not None:
            return refused
        agent.suspend()
        attributed(request, "suspend")
        return JSONResponse({"status": agent.status().status.value})

    async def do_resume(request: Request) -> Response:
        if (refused := bad_reason(request)) is not None:
            return refused
        agent.resume()
        attributed(request, "resume")
        return JSONResponse({"status": agent.status().status.value})

    async def do_rollback(request: Request) -> Response:
        if (refused := bad_reason(request)) is not None:
            return refused
        try:
            held = agent.rollback(request.query_params.get("commit") or None)
        except RollbackRefused as error:
            attributed(request, "rollback", request.query_params.get("commit", ""), f"refused: {error}")
            return _error(409, str(error))
        attributed(request, "rollback", f"to {held.good[:7]}, holding "
                   + ", ".join(sorted(sha[:7] for sha in held.held)))
        return JSONResponse(held.to_json())

    async def by_hand(request: Request) -> Response:
        if (refused := bad_reason(request)) is not None:
            return refused
        endpoint = request.path_params["endpoint"]
        verb = request.url.path.rpartition("/")[2]
        if decide_rollout is None:
            return _error(404, "this agent has no controller to ask")
        try:
            message = await decide_rollout(endpoint, verb, requester(request))
        except ValueError as error:
            attributed(request, verb, f"endpoint {endpoint}", f"refused: {error}")
            return _error(409, str(error))
        attributed(request, verb, message)
        return JSONResponse({"endpoint": endpoint, "message": message})

    async def mismatches(request: Request) -> Response:
        if shadow_mismatches is None:
            return JSONResponse({"mismatches": [], "unreachable": []})
        return JSONResponse(await shadow_mismatches())

    async def logs(request: Request) -> Response:
        if replica_output is None:
            return _error(404, "this agent reads no replica output")
        try:
            since = float(request.query_params["since"]) if "since" in request.query_params else None
            cursors = {rid: OutputCursor.model_validate(c)
                       for rid, c in json.loads(request.query_params.get("cursors", "{}")).items()}
        except (ValueError, TypeError, AttributeError, ValidationError):
            return _error(400, "since must be a number and cursors a JSON object of {out, err} offsets")
        try:
            found = await replica_output(request.path_params["backend"], since, cursors)
        except ValueError as error:
            return _error(404, str(error))
        return JSONResponse({"replicas": [_redacted(output).model_dump(mode="json") for output in found]})

    async def traces(request: Request) -> Response:
        commit = request.query_params.get("commit", "").lower()
        if len(commit) < 4 or any(c not in "0123456789abcdef" for c in commit):
            return _error(400, "commit must be 4 or more hex digits of a commit")
        return JSONResponse({"traces": apply_traces(commit) if apply_traces is not None else []})

    async def whoami(request: Request) -> Response:
        principal: Principal | None = getattr(request.state, "principal", None)
        return JSONResponse({
            "name": principal.name if principal else None, "role": principal.role.label if principal else None,
            "via": principal.via if principal else None,
            "csrf": page_csrf(request, principal) if principal else None,
        }, headers={"Cache-Control": "no-store"})

    async def login(request: Request) -> Response:
        if sign_in is None:
            return _error(404, "no sign-in: the agent runs without --oidc-issuer and --oidc-client-id")
        try:
            authorize, _ = await sign_in.endpoints()
        except BearerRefused as error:
            return _error(502, str(error))
        redirect_uri = _callback_url(request)
        state, verifier = sign_in.logins.begin(redirect_uri)
        query = urlencode({"response_type": "code", "client_id": sign_in.client_id, "redirect_uri": redirect_uri,
                           "scope": "openid", "state": state, "code_challenge": challenge_of(verifier),
                           "code_challenge_method": "S256"})
        return Response(status_code=302, headers={"Location": f"{authorize}?{query}", "Cache-Control": "no-store"})

    async def login_callback(request: Request) -> Response:
        if sign_in is None:
            return _error(404, "no sign-in: the agent runs without --oidc-issuer and --oidc-client-id")
        pending = sign_in.logins.finish(request.query_params.get("state", ""))
        code = request.query_params.get("code", "")
        if pending is None or not code:
            return _error(400, "unknown or expired sign-in (state); start again at /login")
        try:
            principal, claims = await sign_in.exchange(code, pending.verifier, pending.redirect_uri)
        except BearerRefused as error:
            return _error(403, f"sign-in refused: {error}")
        session = sign_in.logins.open(principal, float(claims.get("exp", 0)))
        secure = "; Secure" if pending.redirect_uri.startswith("https:") else ""
        cookie = f"{COOKIE}={session.id}; Path=/; HttpOnly; SameSite=Lax{secure}"
        return Response(status_code=303, headers={"Location": "/", "Set-Cookie": cookie, "Cache-Control": "no-store"})

    async def hook(request: Request) -> Response:
        if webhook is None:
            return _error(404, "no webhook on this listener (it needs --webhook-secret-file; "
                               "with --webhook-port it has its own listener)")
        return await _hook(request, webhook, webhook_fetch)

    routes = [
        Route("/healthz", healthz),
        Route("/status", status),
        Route("/history", history),
        Route("/metrics", metrics_page),
        Route("/sync", do_sync, methods=["POST"]),
        Route("/suspend", do_suspend, methods=["POST"]),
        Route("/resume", do_resume, methods=["POST"]),
        Route("/rollback", do_rollback, methods=["POST"]),
        Route("/rollouts/{endpoint}/promote", by_hand, methods=["POST"]),
        Route("/rollouts/{endpoint}/abort", by_hand, methods=["POST"]),
        Route("/shadow/mismatches", mismatches),
        Route("/logs/{backend}", logs),
        Route("/traces", traces),
        Route("/events", live),
        Route("/plan", plan),
        Route("/audit", audit_export),
        Route("/login", login),
        Route("/session", whoami),
        Route("/login/callback", login_callback),
        Route("/hooks/git", hook, methods=["POST"]),
    ]
    async def status_page(request: Request) -> Response:
        principal: Principal = request.state.principal
        nonce = secrets.token_urlsafe(18)
        mismatches = refusal(principal, rule_for("GET", "/shadow/mismatches"), environment=policy.environment,
                             target=None) is None
        view = PageView(nonce=nonce, csrf=page_csrf(request, principal),
                        who=f"{principal.name} ({principal.role.label})",
                        actions=offered(principal, policy.environment), reads_mismatches=mismatches,
                        rollout_scope=principal.scope.name if principal.scope and principal.scope.kind == "endpoint"
                        else None)
        return HTMLResponse(render_page(commit_url_template=commit_url_template, view=view),
                            headers={**PAGE_HEADERS, "Content-Security-Policy": content_security_policy(nonce)})

    routes.append(Route("/", status_page))
    return _Guarded(Starlette(routes=routes), routes, policy, csrf_key, streams)


def _callback_url(request: Request) -> str:
    """Where the issuer sends the browser back: this listener, as the browser named it."""
    scheme = "https" if request.headers.get("x-forwarded-proto") == "https" else request.url.scheme
    return f"{scheme}://{request.headers.get('host', '127.0.0.1')}/login/callback"


def _redacted(output: ReplicaOutput) -> ReplicaOutput:
    return output.model_copy(update={
        "out": tuple(redact(line) for line in output.out), "err": tuple(redact(line) for line in output.err),
        "last_output": tuple(redact(line) for line in output.last_output), "missing": redact(output.missing),
    })


def requester(request: Request) -> str:
    """Who asked, as history records it: the token's name or the OIDC subject (never a token)."""
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal.name if principal is not None else "anonymous"


def build_webhook_app(webhook: WebhookGuard, webhook_fetch: Callable[[], None]) -> ASGIApp:
    """`POST /hooks/git` and nothing else: what a forge may reach."""

    async def hook(request: Request) -> Response:
        return await _hook(request, webhook, webhook_fetch)

    return Starlette(routes=[Route("/hooks/git", hook, methods=["POST"])])


class _Guarded:
    """Applies the access policy to every HTTP request before routing: Host and
    Origin, then who the bearer is, then the route's row of the role table
    (`gitops.admin.auth.roles.ROUTES`). The principal goes on in `request.state`."""

    def __init__(self, app: ASGIApp, routes: list[Route], policy: AccessPolicy, csrf: CsrfKey,
                 streams: EventStreams) -> None:
        self._app = app
        self.routes = routes  # what the role table must cover (tests walk it)
        self._policy = policy
        self._csrf = csrf
        self._streams = streams

    def close_streams(self) -> None:
        """End the status page's event streams (the listener stops: it need not wait for them)."""
        self._streams.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers: dict[str, str] = {}
            for name, value in scope["headers"]:  # the first of repeated headers counts
                headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
            refused = check(self._policy, scope["method"], scope["path"], headers)
            if refused is None:
                refused = await self._authorize(scope, headers)
            if refused is not None:
                response = _error(refused.status, refused.message, dict(refused.headers))
                await response(scope, receive, send)
                return
        await self._app(scope, receive, send)

    async def _authorize(self, scope: Scope, headers: dict[str, str]) -> Refusal | None:
        template, params = self._route_of(scope)
        rule = rule_for(scope["method"], template)
        if rule.role is None:
            return None
        found = await authenticate(self._policy, headers, scope["method"])
        if isinstance(found, Refusal):
            return found
        target = None
        if rule.target is not None:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            target = params.get(rule.target) or query.get(rule.target)
        reason = refusal(found, rule, environment=self._policy.environment, target=target)
        if reason is not None:
            return Refusal(403, reason)
        if rule.mutating and from_browser(headers) and not self._on_session(headers):
            # A sign-in's session had its own token checked by `authenticate`.
            if not self._csrf.valid(found, headers.get(CSRF_HEADER)):
                return Refusal(403, "missing or wrong X-CSRF-Token for this caller (the status page's: reload it)")
        scope.setdefault("state", {})["principal"] = found
        return None

    def _on_session(self, headers: dict[str, str]) -> bool:
        """Whether `authenticate` took the caller by its sign-in session (no bearer given)."""
        bearer = (headers.get("authorization") or "").partition(" ")[2].strip()
        return self._policy.sessions is not None and self._policy.guarded and not bearer

    def _route_of(self, scope: Scope) -> tuple[str | None, dict[str, Any]]:
        """The path of the route `scope` is for, as declared (`/logs/{backend}`), and its parameters."""
        for route in self.routes:
            match, child = route.matches(scope)
            if match is not Match.NONE:
                return route.path, dict(child.get("path_params", {}))
        return None, {}


class _EventStream(StreamingResponse):
    """`text/event-stream` from `body`; `release` runs however the stream ends (done, left, cancelled)."""

    def __init__(self, body: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(body, media_type="text/event-stream", headers={
            "Cache-Control": "no-store", "X-Accel-Buffering": "no", "X-Content-Type-Options": "nosniff"})
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


class _BodyError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _hook(request: Request, guard: WebhookGuard, fetch: Callable[[], None]) -> Response:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > guard.max_body:
        return _error(413, f"body larger than {guard.max_body} bytes")
    try:
        body = await _read_limited(request, guard.max_body, guard.body_timeout_s)
    except _BodyError as error:
        return _error(error.status, str(error), {"Connection": "close"})
    verdict = verify(guard.secret, body, request.headers.get(SIGNATURE_HEADER))
    if verdict is Verdict.MISSING:
        return _error(401, f"missing {SIGNATURE_HEADER}")
    if verdict is Verdict.INVALID:
        return _error(403, f"{SIGNATURE_HEADER} does not match")
    delivery = request.headers.get(DELIVERY_HEADER)
    if guard.deliveries.seen(delivery, body):
        # Before the rate limit: a replay must not use up what real pushes need.
        return _error(409, "this delivery was already received")
    if not guard.limiter.allow(guard.clock()):
        retry = max(1, round(guard.limiter.retry_after()))
        return _error(429, "too many webhook calls", headers={"Retry-After": str(retry)})
    guard.deliveries.record(delivery, body)
    fetch()
    return JSONResponse({"accepted": True}, status_code=202)


async def _read_limited(request: Request, limit: int, timeout_s: float) -> bytes:
    """The whole body, within `limit` bytes and `timeout_s` seconds, or `_BodyError`.

    A client that leaves mid-body gets nothing verified: its truncated body
    is an error, never a delivery.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _BodyError(413, f"body larger than {limit} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise _BodyError(408, f"body not complete within {timeout_s:g} s") from None
    except ClientDisconnect:
        raise _BodyError(400, "the client left before its body was complete") from None
    return b"".join(chunks)


def _error(code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=code, headers=headers)


class Listener:
    """One of the agent's listeners: `app` served by `httpedge.server` on `host:port` until `stop`."""

    def __init__(self, app: App, host: str, port: int, limits: EdgeLimits = ADMIN_LIMITS) -> None:
        self.host = host
        self.port = port
        self._app = app
        self._server = Server(app, limits)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_asked = False
        self._stopping: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self._server.started

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve on `sockets` (bound), else on a socket bound to `host:port`; returns once stopped."""
        self._loop = asyncio.get_running_loop()
        if self._stop_asked:
            return
        if sockets is None:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sockets = [socket.create_server((self.host, self.port), family=family)]
        await self._server.serve(sockets)

    def stop(self) -> None:
        """From any thread: stop accepting, let answers in flight end (within a bound); `serve` then returns."""
        self._stop_asked = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._shut_down)

    def _shut_down(self) -> None:
        close_streams = getattr(self._app, "close_streams", None)
        if close_streams is not None:  # the admin app's page streams end within a poll, not at the grace
            close_streams()
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._server.shutdown(_SHUTDOWN_GRACE_S))


def server(app: App, host: str, port: int, limits: EdgeLimits = ADMIN_LIMITS) -> Listener:
    """A quiet server, bounded by `limits`, to `await server.serve()` on the agent's loop."""
    return Listener(app, host, port, limits)
