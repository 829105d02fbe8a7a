"""The proxy's ASGI application: one request in, one replica call out, through a chain of stages.

Owns the request path's order, which `ProxyApp.__call__` runs top to bottom:

1. read the snapshot once, normalise the path (400 for dot segments and
   encoded slashes), answer the proxy's own `/-/` routes, and resolve the
   route (`proxy.routes.routing`: 404, 405; 503 with Retry-After until a
   first complete route table came);
2. the endpoint's chain of stages (`proxy.pipeline.stage`) takes the request,
   in the one order `ProxyApp.__init__` lists them:

       admission (limits) -> token budget -> steering -> tracing -> capture -> shadow -> [forward] -> counting

   each a module of `proxy.pipeline.stages`, left out of an endpoint's chain when
   its feature is off for it; its `begin` hooks run (a refusal there is
   answered at once, not counted);
3. one pass over the headers says whether a body follows and reads the
   client's `X-Request-Timeout` (`proxy.pipeline.body.framing`,
   `proxy.pipeline.forward.client_timeout`: 400 when it is no number of
   seconds); the body is read (`proxy.pipeline.body`: bounded in size, time
   and the worker's budget; a client that leaves before it is read causes no
   replica call, recorded as 499; a truncated body is never forwarded);
4. the wire request is formed, the route prefix going along with it
   (`with_root_path`, so an ASGI app in the replica serves under it), and
   the `formed` hooks run;
5. it is forwarded (`proxy.pipeline.forward`): one call to the replica pool
   under the endpoint's timeout, shortened by the client's deadline, which
   travels with the call; a client that leaves while its call runs cancels
   it, 499; its failures are the proxy's answers;
6. the answer is sent and the `answered` hooks run; a streamed answer
   (`StreamStart`, held with its replica slot) is sent as it comes instead
   (`proxy.pipeline.streaming.answer_stream`: its `timeout_s` bounds the time
   to its first chunk and each gap between chunks; never copied to shadows
   or compared); a client that left runs the `left` hooks.

Every outcome maps to the status codes of docs/reference/http.md.
WebSocket connections are handed to `proxy.pipeline.websockets`.
Hop-by-hop headers are dropped both ways (`proxy.pipeline.transit.end_to_end`).
The gRPC port (`proxy.grpc_ingress`) shares the app's stages, snapshot, pool
calls (`ProxyApp.sender`), caller, recorder and Retry-After.

Deliberately a bare ASGI callable rather than a Starlette app: the hot path
allocates only its `Transit`, the wire tuple and the response events, and logs
nothing unless something failed. Results are reported through one `Recorder`
(`proxy.pipeline.stages.count`), the single place metrics hook in.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

from httpedge.asgi import Receive, Scope, Send
from proxy.observability.bodies import EMPTY, BodyView
from proxy.observability.capture import CaptureWriter
from proxy.observability.request_stats import RequestCounter
from proxy.observability.shadow_compare import MismatchLog
from proxy.observability.tracing import RequestTracing
from proxy.pipeline.stages.admit import Admission
from proxy.pipeline.body import BodyBudget, framing, read, unframed
from proxy.pipeline.stages.budget import TokenBudgeting
from proxy.pipeline.stages.capture import Capture
from proxy.pipeline.stages.count import Counting, NullRecorder, Recorder
from proxy.pipeline.forward import Forwarding, client_timeout
from proxy.pipeline.running_calls import WATCH_AFTER_S, RunningCalls
from proxy.pipeline.running_calls import ClientLeft
from proxy.pipeline.stages.shadow import Shadowing
from proxy.pipeline.stage import Chain, Stage, chains
from proxy.pipeline.stages.steer import Steering
from proxy.pipeline.streaming import answer_stream
from proxy.pipeline.stages.trace import Tracing
from proxy.pipeline.transit import CLIENT_LEFT, TEXT, Refusal, Transit, end_to_end, send_answer
from proxy.pipeline.websockets import WebSocketCarrier
from proxy.pool.calling import Caller
from proxy.pool.sending import Held, Sender

from proxy.routes.rate_limits import Buckets, LocalBuckets
from proxy.routes.routing import Resolution, normalise_path, resolve
from proxy.routes.snapshot import Snapshot
from proxy.settings import ProxySettings
from vocabulary.request_path.choosing import Random
from vocabulary.control.request_stats import RequestStats
from vocabulary.request_path.wire import with_root_path

__all__ = ["ProxyApp", "Recorder", "NullRecorder", "CLIENT_LEFT"]

logger = logging.getLogger(__name__)

_JSON = [(b"content-type", b"application/json")]


class ProxyApp:
    """The ASGI callable `httpedge.server` serves; holds the current snapshot, its endpoints'
    chains of stages, and the shadow copies in flight."""

    def __init__(
        self, caller: Caller, settings: ProxySettings = ProxySettings(), rng: Random | None = None,
        recorder: Recorder | None = None, mismatches: MismatchLog | None = None, buckets: Buckets | None = None,
        tracing: RequestTracing | None = None, capture: CaptureWriter | None = None,
    ) -> None:
        """`mismatches`: where shadow mismatches are kept and answered from (default: this process's memory);
        `buckets`: the tenants' token buckets (default: this process's own; a node's workers share theirs);
        `tracing`: the request spans (`proxy.observability.tracing`; None: tracing off, in no chain);
        `capture`: where `[capture]` records go (`proxy.observability.capture`; None: nothing is captured)."""
        self._settings = settings
        rng = rng or random.Random()
        # What the gRPC ingress (`proxy.grpc_ingress`) shares with the HTTP path: one pool call, one caller,
        # one recorder, one Retry-After, so a gRPC call is routed, limited and counted as a request is.
        self.recorder = recorder = recorder or NullRecorder()  # the lambdas below look it up at each report
        self.caller = caller
        self.retry_after = [(b"retry-after", str(settings.retry_after_s).encode())]
        # This loop's replica calls and body reads, held to their deadlines by one sweep.
        self._running = RunningCalls(WATCH_AFTER_S)
        self._forwarding = Forwarding(caller, rng, self.retry_after, lambda: self.recorder, self._running)
        self.sender: Sender = self._forwarding.sender
        self._counts = RequestCounter()
        self._websockets = WebSocketCarrier(caller, rng, recorder, self._counts, tracing, capture)
        self._bodies = BodyBudget(settings.max_bodies_in_flight_bytes, self.retry_after)
        captured = None if capture is None else Capture(capture)
        self._shadows = Shadowing(
            caller, rng, recorder, mismatches if mismatches is not None else MismatchLog(),
            settings.max_shadow_in_flight, captured.done if captured is not None else lambda _: None,
            self._counts.record_comparison,
        )
        self.mismatches = self._shadows.mismatches
        # The request path's stages, in their one order (proxy.pipeline.stage); None: off in this proxy.
        buckets = buckets if buckets is not None else LocalBuckets()
        stages = (
            Admission(buckets, lambda endpoint: self.recorder.rate_limited(endpoint)),
            TokenBudgeting(
                buckets,
                lambda endpoint, tenant, tokens: self.recorder.tokens_admitted(endpoint, tenant, tokens),
                lambda endpoint, tenant, tokens: self.recorder.tokens_charged(endpoint, tenant, tokens),
                lambda endpoint, tenant: self.recorder.token_limited(endpoint, tenant),
            ),
            Steering(rng),
            None if tracing is None else Tracing(tracing),
            captured,
            self._shadows,
            Counting(recorder, self._counts),
        )
        self.stages: tuple[Stage, ...] = tuple(stage for stage in stages if stage is not None)
        self._snapshot = Snapshot()
        self._chains: dict[str, Chain] = {}
        # Until its first complete route table arrives a proxy (new, or restarted) does not know which
        # paths exist: it answers 503 + Retry-After (never a 404 a client would cache) and is not healthy.
        self._routed = False

    # --- the config side -----------------------------------------------------

    def install(self, snapshot: Snapshot) -> None:
        """Serve `snapshot` from the next request on, its endpoints' chains built once here."""
        self._chains = chains(self.stages, snapshot.endpoints.values())
        self._snapshot = snapshot
        self._routed = self._routed or snapshot.complete

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def routed(self) -> bool:
        """Whether a first complete route table came (until then every request is 503)."""
        return self._routed

    def backend_load(self) -> dict[str, dict[str, float]]:
        return self._snapshot.backend_load()

    def stalled_replicas(self) -> dict[str, dict[str, str]]:
        return self._snapshot.stalled_replicas()

    def ejected_replicas(self) -> dict[str, dict[str, dict[str, Any]]]:
        return self._snapshot.ejected_replicas()

    def request_stats(self) -> dict[str, RequestStats]:
        """Per backend, the answers counted since this proxy started (for rollout checks)."""
        return self._counts.snapshot()

    def endpoint_request_stats(self) -> dict[str, RequestStats]:
        """Per endpoint, the answers and shadow comparisons counted since this proxy started
        (for the status and promotions' evidence)."""
        return self._counts.by_endpoint()

    # --- the request side ----------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await self._websockets.carry(self._snapshot if self._routed else None, scope, receive, send)
            return
        path = normalise_path(scope.get("raw_path") or scope["path"].encode())
        if path is None:
            await send_answer(send, 400, TEXT, b"Bad Request: dot segments and encoded slashes are not allowed in paths")
            return
        if path.startswith("/-/"):
            await self._admin(path, send)
            return
        if not self._routed:
            await send_answer(send, 503, [*TEXT, *self.retry_after], b"Starting: no route table yet")
            return
        snapshot, chain = self._snapshot, self._chains
        resolution, route = resolve(snapshot.routes, path, scope["method"])
        if route is None:
            await send_answer(send, 404, TEXT, b"Not Found")
            return
        if resolution is Resolution.METHOD_NOT_ALLOWED:
            await send_answer(send, 405, [*TEXT, (b"allow", route.allow.encode())], b"Method Not Allowed")
            return
        served = snapshot.endpoints[route.endpoint]
        stages = chain[served.name]
        transit = Transit(scope, path, snapshot, served, time.perf_counter())
        try:
            for hook in stages.begin:
                hook(transit)
        except Refusal as refused:  # before the body: answered, not counted
            await send_answer(send, refused.status, *refused.answer())
            return
        held = 0  # body bytes this request counts against the worker's budget until it ends
        try:
            has_body, timeout = framing(scope["headers"])
            client_s = None if timeout is None else client_timeout(timeout)
            if has_body:
                body = await read(
                    scope, receive, served.max_body_bytes, self._settings, self._bodies, self._running,
                )
            else:  # most requests (a GET): no coroutine of their own
                body = unframed(await receive())
            held = len(body)
            transit.request = (
                scope["method"], path, scope["query_string"], with_root_path(end_to_end(scope["headers"]), route.prefix),
                body,
            )
            for hook in stages.formed:
                hook(transit)
            reply = await self._forwarding.forward(transit, receive, client_s)
            if isinstance(reply, Held):
                await answer_stream(transit, reply, stages, self.caller, self.recorder, receive, send)
                return
            status, headers, payload = reply[0], end_to_end(reply[1]), reply[2]
        except Refusal as refused:
            status, (headers, payload) = refused.status, refused.answer()
        except ClientLeft as left:
            logger.info("%s %s: client left %s (499)", scope["method"], path, left)
            transit.duration_s = time.perf_counter() - transit.started
            for hook in stages.left:
                hook(transit)
            return
        finally:
            if held:
                self._bodies.give(held)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})
        transit.duration_s = time.perf_counter() - transit.started
        # The stages read the very bytes the client was sent, never a copy; none of a plain endpoint's does.
        sent = BodyView.one(payload) if stages.reads_answers else EMPTY
        for answered in stages.answered:
            answered(transit, status, headers, sent)

    # --- the proxy's own routes ------------------------------------------------

    async def _admin(self, path: str, send: Send) -> None:
        if path == "/-/healthz":
            await send_answer(send, *((200, TEXT, b"ok") if self._routed else (503, TEXT, b"starting")))
        elif path == "/-/routes":
            await send_answer(send, 200, _JSON, self._snapshot.routes_json)
        else:
            await send_answer(send, 404, TEXT, b"Not Found")

    @property
    def _shadow_tasks(self) -> set[asyncio.Task[None]]:
        """The shadow copies in flight (tests wait for them)."""
        return self._shadows.tasks

    async def stop_shadows(self) -> None:
        await self._shadows.stop()

