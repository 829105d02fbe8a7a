"""The shadow stage: copies of a request to an endpoint's shadow backends, compared with its answer.

On for an endpoint with shadow shares. At `formed` the sampled copies go out
(each never waits for a slot: a saturated shadow backend, or one with
`max_shadow_in_flight` copies out, drops the copy), without any
credential-looking header (`proxy.observability.redacting.credential_like`,
by pattern: any name with auth, key, token, secret, password, session,
credential or cookie in it once `_` reads as `-`: no endpoint can opt back
in, a candidate backend is not trusted with users' credentials) and without the
query string unless the endpoint sets `shadow_query`. With a comparison, each
copy's answer is compared with the primary's once that has gone out (never a
stream's), the primary's body read through its view (`BodyView`: the very
piece its client was sent, not a copy), mismatches kept in the `MismatchLog`. A captured request's record
waits for its copies' answers (and verdicts) and carries them.

The gRPC port's calls (`proxy.grpc_ingress`) pass this same stage, so one
`max_shadow_in_flight` bounds both ports' copies: a call's copy is the same
gRPC call (its metadata as headers, credential-looking keys dropped) to a
shadow backend's replica, compared on the replica's reply (status and
message bytes: `exact` or `status`; a streamed reply never); a batched
shadow backend serves no gRPC call, and its copy is dropped.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable, Protocol

from proxy.observability.metrics import ShadowResult
from proxy.observability.redacting import Exchange, ShadowAnswer, credential_like
from proxy.observability.shadow_compare import Answer, Comparison, Mismatch, MismatchLog, compare
from proxy.observability.bodies import BodyView
from proxy.pipeline.stage import Headers, Stage
from proxy.pipeline.transit import TEXT, Transit
from proxy.pool.calling import Caller, HandlerError, ReplicaDiedError
from proxy.pool.replicas import ReplicaPool, ReplicaSlot
from proxy.pool.sending import took_load
from proxy.routes.snapshot import ServedEndpoint, Snapshot
from vocabulary.request_path.choosing import Random
from vocabulary.request_path.grpc_calls import is_grpc_call
from vocabulary.spec.endpoints import ShadowCompare
from vocabulary.request_path.wire import StreamStart, WireRequest, WireResponse

__all__ = ["Shadowing", "ShadowRecorder"]

class ShadowRecorder(Protocol):
    def shadow_done(self, endpoint: str, backend: str, result: ShadowResult) -> None: ...

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None: ...


class Shadowing(Stage):
    """The shadow copies in flight, per backend, and their comparisons."""

    def __init__(
        self, caller: Caller, rng: Random, recorder: ShadowRecorder, mismatches: MismatchLog, max_in_flight: int,
        captured_done: Callable[[Exchange], None], counted: Callable[[str, bool], None] = lambda endpoint, matched: None,
    ) -> None:
        """`captured_done(record)`: a copy of a captured request answered (`proxy.pipeline.stages.capture.Capture.done`);
        `counted(endpoint, matched)`: a reply compared, counted for the controller (`RequestCounter.record_comparison`)."""
        self._caller = caller
        self._rng = rng
        self._recorder = recorder
        self.mismatches = mismatches
        self._max_in_flight = max_in_flight
        self._captured_done = captured_done
        self._counted = counted
        self.tasks: set[asyncio.Task[None]] = set()
        self._in_flight: dict[str, int] = {}

    def hooks(self, served: ServedEndpoint) -> Iterable[str]:
        return ("formed", "streaming", "answered") if served.shadow.shares else ()

    def formed(self, transit: Transit) -> None:
        assert transit.request is not None
        transit.primary = self._copy(transit.snapshot, transit.served, transit.request, transit.captured)

    def streaming(self, transit: Transit) -> None:
        if transit.primary is not None:
            transit.primary.cancel()  # a stream is never compared

    def answered(self, transit: Transit, status: int, headers: Headers, payload: BodyView) -> None:
        if transit.primary is not None and transit.held is None:
            # Compared only now: the primary's answer has already gone out.
            transit.primary.set_result((status, headers, payload))

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def _copy(
        self, snapshot: Snapshot, served: ServedEndpoint, request: WireRequest, captured: Exchange | None,
    ) -> asyncio.Future[Answer] | None:
        """Start the shadow copies; with a comparison, the future the primary's
        reply is set on (None when nothing is compared)."""
        method, path, query, headers, body = request
        kept = [(name, value) for name, value in headers if not credential_like(name)]
        request = (method, path, query if served.shadow_query else b"", kept, body)
        primary: asyncio.Future[Answer] | None = None
        for backend in served.shadow.sample(self._rng):
            pool = snapshot.pools.get(backend)
            if pool is not None and pool.batching is not None and is_grpc_call(request):
                pool = None  # a batched backend's handler takes lists of HTTP requests: no gRPC call
            slot = self._slot(backend, pool)
            if pool is None or slot is None:
                self._recorder.shadow_done(served.name, backend, ShadowResult.DROPPED)
                if captured is not None:
                    captured.shadows.append(ShadowAnswer(backend, ShadowResult.DROPPED.value))
                continue
            if primary is None and served.compare is not ShadowCompare.NONE:
                primary = asyncio.get_running_loop().create_future()
            if captured is not None:
                captured.shadows_out += 1
            task = asyncio.ensure_future(self._shadow(served, pool, slot, request, primary, captured))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        return primary

    def _slot(self, backend: str, pool: ReplicaPool | None) -> ReplicaSlot | None:
        # Shadows never wait: a saturated shadow backend drops the copy.
        if pool is None or self._in_flight.get(backend, 0) >= self._max_in_flight:
            return None
        slot = pool.try_acquire()
        if slot is not None:
            self._in_flight[backend] = self._in_flight.get(backend, 0) + 1
        return slot

    async def _shadow(
        self, served: ServedEndpoint, pool: ReplicaPool, slot: ReplicaSlot, request: WireRequest,
        primary: asyncio.Future[Answer] | None, captured: Exchange | None = None,
    ) -> None:
        result = ShadowResult.OK
        reply: WireResponse | None = None
        try:
            async with asyncio.timeout(served.timeout_s):
                answer = took_load(slot, await self._caller.call(slot.handle, request, served.timeout_s, pool.batching))
            if isinstance(answer, StreamStart):
                self._caller.discard(slot.handle, answer)
            else:
                reply = answer  # a stream is never compared
        except ReplicaDiedError:
            pool.drop(slot)
            result = ShadowResult.ERROR
        except HandlerError:
            result = ShadowResult.ERROR
            reply = (500, TEXT, b"Internal Server Error")  # what a client would have got
        except TimeoutError:
            result = ShadowResult.TIMEOUT
        finally:
            pool.release(slot)
            self._in_flight[pool.backend] -= 1
        self._recorder.shadow_done(served.name, pool.backend, result)
        found = None
        try:
            if primary is not None and reply is not None:
                found = await self._compare(served, pool.backend, request[1], primary, reply)
        finally:
            if captured is not None:
                shadowed = ShadowAnswer(pool.backend, result.value, reply)
                if found is not None:
                    # The record names JSON paths and types, never values, whatever shadow_values says.
                    shadowed.matched, shadowed.diff = found[1].matched, found[1].diff
                captured.shadows.append(shadowed)
                captured.shadows_out -= 1
                self._captured_done(captured)

    async def _compare(
        self, served: ServedEndpoint, backend: str, path: str, primary: asyncio.Future[Answer], reply: WireResponse
    ) -> tuple[Comparison, Comparison] | None:
        """The comparison as the mismatch sample shows it and as a capture record may
        (paths and types only); None when there was nothing to compare with."""
        try:
            async with asyncio.timeout(served.timeout_s):
                answered = await asyncio.shield(primary)
        except TimeoutError:
            return None  # the primary never answered: nothing to compare with
        except asyncio.CancelledError:
            if primary.cancelled():
                return None  # the primary streamed: nothing to compare with
            raise
        found = compare(served.compare, served.ignore, answered, reply, served.shadow_values)
        self._recorder.shadow_compared(served.name, backend, found.matched)
        self._counted(served.name, found.matched)
        if not found.matched:
            self.mismatches.record(Mismatch(time.time(), served.name, backend, path, answered[0], reply[0], found.diff))
        recordable = found if not served.shadow_values else compare(served.compare, served.ignore, answered, reply, False)
        return found, recordable

