"""The LLM simulator as a Ray Serve 2.60 application, for `bench.routing`: Serve's routers on the same replicas.

Ray Serve routes in the caller of a `DeploymentHandle`, and its
`PrefixCacheAffinityRouter` reads the prompt from the call's arguments: the
first argument with a `messages` (or `prompt`) attribute. An HTTP request
reaching a deployment has none (Serve's proxy passes the request as
serialised bytes; with direct ingress or HAProxy no router runs at all), so
the router works only behind a handle call, which is how Serve LLM itself is
built (its OpenAI ingress calls its `LLMServer` through a handle). The same
shape here, with no Serve LLM and no vLLM:

- `SimIngress` (one replica, HTTP): parses the body once and calls the
  server with a `ChatCall`, streaming the answer back;
- `SimServer` (`replicas` replicas): `deployments.apps.llm_sim.LLMSim`,
  the simulator ours serves, answering `LLMSim.complete(body)` chunk by
  chunk; its `request_router_config` names the router.

`ROUTERS` maps a router's label to its class path. The public path of
Serve's router, `ray.serve.llm.request_router.PrefixCacheAffinityRouter`,
imports Serve LLM and with it `ray[llm]`'s dependencies (pyarrow, ...,
vllm 0.29 pinned): without them it fails with `ModuleNotFoundError: No
module named 'pyarrow'`. The class it re-exports unchanged (a `pass`
subclass) is named by its own module, which needs none of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

PUBLIC_ROUTER = "ray.serve.llm.request_router.PrefixCacheAffinityRouter"
ROUTERS = {
    "prefix_cache_affinity": "ray.llm._internal.serve.routing_policies.prefix_aware.prefix_aware_router."
                             "PrefixCacheAffinityRouter",
    "power_of_two": "ray.serve._private.request_router:PowerOfTwoChoicesRequestRouter",
}


@dataclass
class ChatCall:
    """One chat request as the ingress hands it on: `messages` is what Serve's router reads."""

    messages: list[Any]
    body: dict[str, Any] = field(default_factory=dict)


class SimServer:
    """The simulator behind a handle: `chat` yields the answer's chunks (SSE events, or the JSON body)."""

    def __init__(self, settings: dict[str, float]) -> None:
        from deployments.apps.llm_sim import LLMSim

        self.sim = LLMSim(**settings)

    async def chat(self, call: ChatCall) -> AsyncIterator[bytes]:
        from starlette.responses import StreamingResponse

        answer = await self.sim.complete(call.body)
        if isinstance(answer, StreamingResponse):
            async for chunk in answer.body_iterator:
                yield chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        else:
            yield bytes(answer.body)


class SimIngress:
    """HTTP in: one parse of the body, one streamed handle call to `SimServer`."""

    def __init__(self, server: Any) -> None:
        self.server = server.options(stream=True)

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        try:
            body = json.loads(await request.body())
            messages = body["messages"]
        except (ValueError, KeyError, TypeError) as error:
            return JSONResponse({"error": {"message": f"bad request: {error}"}}, 400)
        chunks = self.server.chat.remote(ChatCall(messages=messages, body=body))
        streamed = bool(body.get("stream"))
        return StreamingResponse(chunks, media_type="text/event-stream" if streamed else "application/json")


def serve_app(router: str, replicas: int, settings: dict[str, float]) -> Any:
    """The bound application: ingress → `replicas` simulator replicas routed by `ROUTERS[router]`."""
    from ray import serve

    quiet = {"enable_access_log": False}
    server = serve.deployment(name="SimServer")(SimServer).options(
        num_replicas=replicas, max_ongoing_requests=100, ray_actor_options={"num_cpus": 0},
        request_router_config={"request_router_class": ROUTERS[router]}, logging_config=quiet,
    )
    ingress = serve.deployment(name="SimIngress")(SimIngress).options(
        max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0}, logging_config=quiet,
    )
    return ingress.bind(server.bind(settings))
