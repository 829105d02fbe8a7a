"""The actors' APIs as their callers see them, and the typed handle they are called through.

`ReplicaAPI` is what the replica actor (`replica.host:Replica`) answers,
`ProxyAPI` what the proxy actor (`proxy.actor:ProxyActor`) answers, and
`ControllerAPI` what the controller actor (`controller.actor:ControllerActor`)
answers: `vocabulary.control.goal_api.GoalAPI` plus the calls of its agent, its
proxies and the tests. Each method is written as its caller meets it: every
Ray call is awaited, so a method the actor defines plainly is `async` here;
a streaming method (an async generator on the actor) returns an
`AsyncIterator`. A test checks each actor class against its protocol
(`tests/component/test_actor_apis.py`), so a method renamed on one side only
fails there, not in a real-Ray run.

`Remote[API]` wraps a Ray actor handle (or a test's stand-in) so that callers
name the protocol's method, not a string: `replica.call(ReplicaAPI.ready)`
is `handle.ready.remote()`, typed by the protocol (arguments and result);
`replica.stream(ReplicaAPI.stream, stream_id)` starts a streaming call. What
comes back is Ray's own: an `ObjectRef` (awaitable) or an
`ObjectRefGenerator` (an async iterator of them), typed here without
importing Ray; the shells that hand one to `ray.get`, `ray.wait` or
`ray.cancel` name it an ObjectRef there.
"""

from __future__ import annotations

from typing import Any, AsyncIterator, Awaitable, Callable, Concatenate, Generic, Mapping, ParamSpec, Protocol, TypeVar

from vocabulary.control.goal_api import GoalAPI
from vocabulary.request_path.wire import DataAddress
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.request_stats import RequestStats
from vocabulary.control.status import ModelStaging
from vocabulary.request_path.wire import TimedRequest, CallResult, StreamStart, WireRequest, WireResponse

__all__ = [
    "ReplicaAPI", "ProxyAPI", "ControllerAPI", "Remote", "ReplicaHandle", "ProxyHandle", "ControllerHandle",
]

API = TypeVar("API")
P = ParamSpec("P")
R = TypeVar("R")
Y = TypeVar("Y")


class ReplicaAPI(Protocol):
    """The replica actor: requests, streams and WebSockets over Ray (the
    data path's fallback), its data address, health and draining."""

    async def initialize(self, secrets: bytes | None = None) -> str:
        """Load the user's code and serve; the node it runs on. `secrets`, sealed
        to `secrets_recipient()`, are opened before any user code runs."""

    async def staging(self) -> list[ModelStaging]:
        """The models it is fetching before its code starts, and how far each is (none once started)."""

    async def secrets_recipient(self) -> str:
        """This replica's age public key, which the controller seals its secrets to."""

    async def update_secrets(self, sealed: bytes) -> None:
        """New secret values (a rotation), sealed to `secrets_recipient()`."""

    async def output(self, since: float | None = None, cursor: OutputCursor | None = None) -> ReplicaOutput:
        """Its own stdout and stderr lines: after `cursor`, written since `since`, or the last few kilobytes."""

    async def serve_frames(self, bases: list[str], max_frame: int = ..., tcp_host: str | None = None) -> str | None:
        """Serve frames on a Unix socket under the first fitting base (and TCP given `tcp_host`)."""

    async def data_address(self, for_node: str | None = None) -> DataAddress | None:
        """Where it serves frames (opening TCP for another node's proxy), or None."""

    async def data_connections(self) -> dict[str, int]:
        """Data connections served so far, by "unix" and "tcp"."""

    async def frames_served(self) -> int:
        """Requests answered over the data connection so far."""

    async def frames_streamed(self) -> int:
        """Streams and WebSockets served over the data connection so far."""

    async def handle_request(self, wire: WireRequest) -> WireResponse | StreamStart:
        """One HTTP request: the whole answer, or the head of a stream."""

    def stream(self, stream_id: str) -> AsyncIterator[bytes]:
        """A streaming answer's rest (a Ray streaming call)."""

    async def close_stream(self, stream_id: str) -> None:
        """Let a streaming answer go unread."""

    def websocket(self, websocket_id: str, wire: WireRequest) -> AsyncIterator[dict[str, Any]]:
        """A WebSocket: what the app sends, until it closes (a Ray streaming call)."""

    async def websocket_message(self, websocket_id: str, message: dict[str, Any]) -> bool:
        """A client's message to `websocket_id`, answered once the app has room; False when it is gone."""

    async def handle_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], trace: dict[str, str] | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """A call from another replica's `ray_gitops.serving` handle; the user code's result.
        `trace`: the caller's W3C trace context (`traceparent`, ...) when the call is traced;
        `deadline_s`: the seconds left of the caller's deadline, when it has one."""

    async def handle_batch(self, batch: list[TimedRequest]) -> list[CallResult]:
        """A batched handler's list, in one call."""

    async def handle_coalesced(self, items: list[TimedRequest]) -> list[CallResult]:
        """Separate requests coalesced into one Ray call."""

    async def reconfigure(self, user_config: Any) -> None:
        """Hand the user's code its new `user_config`."""

    async def check_health(self) -> None:
        """Raises when the user's code says it is unhealthy."""

    async def prepare_for_shutdown(self, timeout_s: float) -> None:
        """Stop taking connections and wait (bounded) for in-flight requests."""

    async def num_ongoing(self) -> int:
        """Requests in flight."""

    async def ready(self) -> str:
        """Liveness that never touches user code: the replica's id."""


class ProxyAPI(Protocol):
    """The proxy actor, as the controller starts, pings and stops it."""

    async def ready(self) -> str:
        """`host:port` once its HTTP server listens."""

    async def grpc_address(self) -> str | None:
        """`host:port` of its gRPC port once that listens; None when it serves no gRPC."""

    async def ping(self) -> int:
        """Its process id: a restart shows as a new answer."""

    async def shutdown(self) -> None:
        """Stop polling, finish in-flight requests (bounded), close the socket."""

    async def shadow_mismatches(self) -> list[dict[str, Any]]:
        """Its node's shadow mismatch sample (never served on the public port)."""


class ControllerAPI(GoalAPI, Protocol):
    """The controller actor: the goal API, and its agent's, proxies' and tests' calls."""

    async def claim(self, owner: dict[str, Any], take_over: bool) -> dict[str, Any] | None:
        """Record `owner` as the controller's agent; the other owner's record if refused."""

    async def owner(self) -> dict[str, Any] | None:
        """The owning agent's record."""

    async def release(self, agent_id: str) -> None:
        """Forget the owner if it is still `agent_id`."""

    async def set_prometheus_url(self, url: str | None) -> None:
        """Where rollouts' metric checks are asked from now on."""

    async def secrets_recipient(self) -> str:
        """The public key the agent seals backends' secret values to."""

    async def put_secrets(self, sealed: bytes) -> list[str]:
        """Backends' secret values, sealed by the agent to `secrets_recipient()`."""

    async def secrets_missing(self) -> list[str]:
        """Backends whose configs name secret values this controller does not hold."""

    async def replica_output(
        self, backend: str, since: float | None = None, cursors: dict[str, OutputCursor] | None = None
    ) -> list[ReplicaOutput]:
        """Every replica of `backend`'s own output, for `gitops logs`."""

    async def listen_for_change(
        self, keys_to_snapshot_ids: dict[str, int], proxy_id: str | None = None
    ) -> dict[str, tuple[int, Any]]:
        """The long poll: new snapshots of the keys whose ids changed."""

    async def report_load(
        self, proxy_id: str, loads: dict[str, tuple[int, int]], requests: dict[str, Any] | None = None,
        endpoint_requests: dict[str, Any] | None = None, reported: dict[str, float] | None = None,
        stalled: dict[str, dict[str, str]] | None = None,
        ejected: dict[str, dict[str, dict[str, Any]]] | None = None,
    ) -> None:
        """One proxy's (ongoing, queued) per backend, its answers counted per backend and endpoint,
        the loads its replicas reported, and (`stalled`) per backend the replicas it found hung
        (id -> what it saw), for the controller to replace; (`ejected`) per backend the replicas it
        ejected as outliers (id -> `{"reason", "count", "back_in_s", "replace"}`), for the status,
        and those to replace (`replace` true: ejected too often)."""

    async def get_load(self) -> dict[str, dict[str, tuple[int, int]]]:
        """The latest loads, per proxy."""

    async def endpoint_totals(self) -> dict[str, RequestStats]:
        """Each endpoint's answers and shadow comparisons, every proxy's reports added up."""

    async def set_target_replicas(self, backend: str, target: int) -> None:
        """The autoscaler's knob: how many replicas `backend` wants."""

    async def decide_rollout(self, endpoint: str, verb: str, who: str) -> str:
        """Promote or abort `endpoint`'s running rollout by hand, as `who`; its message."""

    async def ping(self) -> str:
        """Liveness."""

    async def arm_kill_switch(self, point: str) -> None:
        """Test hook: exit the next time the loop reaches `point`."""

    async def shutdown_all(self) -> None:
        """Stop proxies, replicas and the loop, and forget the checkpoint."""

    async def process_info(self) -> dict[str, float]:
        """The process's CPU seconds so far (the idle-CPU benchmark)."""


class Remote(Generic[API]):
    """A Ray actor handle called through its API protocol.

    Two `Remote`s are one replica only if they are one object (the data path
    keys its connections by it), as with Ray's handles; `actor` is the handle
    itself, for `ray.kill` and the like.
    """

    __slots__ = ("actor", "__weakref__")

    def __init__(self, actor: object) -> None:
        self.actor = actor

    def call(self, method: Callable[Concatenate[API, P], Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        """Start `method` on the actor; its ObjectRef."""
        return getattr(self.actor, method.__name__).remote(*args, **kwargs)

    def stream(
        self, method: Callable[Concatenate[API, P], AsyncIterator[Y]], /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncIterator[Awaitable[Y]]:
        """Start the streaming `method` on the actor; its ObjectRefGenerator."""
        return getattr(self.actor, method.__name__).remote(*args, **kwargs)

    def stream_with(
        self,
        options: Mapping[str, Any],
        method: Callable[Concatenate[API, P], AsyncIterator[Y]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> AsyncIterator[Awaitable[Y]]:
        """`stream` with Ray call options (the generator's backpressure, say)."""
        return getattr(self.actor, method.__name__).options(**options).remote(*args, **kwargs)

    def __repr__(self) -> str:
        return repr(self.actor)


ReplicaHandle = Remote[ReplicaAPI]
ProxyHandle = Remote[ProxyAPI]
ControllerHandle = Remote[ControllerAPI]
