"""`ReplicaCaller` over Ray actor calls: the only place the request path touches Ray.

One `handle_request` actor call per request. Ray's error types are mapped to
`proxy.calling`'s, and a cancelled wait cancels the replica-side task (that
is how an endpoint timeout stops user code). Never blocks the event loop:
results are awaited, never fetched with `ray.get`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import ActorUnschedulableError, RayActorError, RayTaskError

from proxy.calling import HandlerError, ReplicaDiedError
from proxy.wire import WireRequest, WireResponse

__all__ = ["RayCaller"]


class RayCaller:
    async def call(self, handle: Any, request: WireRequest) -> WireResponse:
        ref = handle.handle_request.remote(request)
        try:
            return await ref
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise
        except (RayActorError, ActorUnschedulableError) as error:
            raise ReplicaDiedError(str(error)) from None
        except RayTaskError as error:
            raise HandlerError(str(error)) from None
