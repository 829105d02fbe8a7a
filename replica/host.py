"""The replica actor: hosts one backend's user code and serves its requests.

Owns loading the user's callable (`import_path` "module:attr", resolved from
the working_dir Ray puts on sys.path; for `protocol = "v2"` a model class,
served by the v2 app around it, `ray_gitops.v2.app`), calling it with a Starlette request,
`reconfigure`, `check_health` (whose answer is the latest exception a
handler raised, `vocabulary.control.status.HandlerError`; the traceback goes to the
replica's stderr too, at most one a second), `output` (its own stdout and
stderr lines, `replica.own_output`, for `gitops logs`) and graceful draining. It does not know about
routing, retries or its own lifecycle: `controller.shell.ray_adapter` wraps this
plain class with `ray.remote` and options; the proxy calls `handle_request`
(or `handle_coalesced` for several requests coalesced into one Ray call), and
`handle_batch` for a batched backend, whose handler takes a list of
requests and returns a list of the same length. Which requests form a batch
is the caller's choice (`proxy.pool.coalescing`); the replica runs what it is given.
A handler (or an ASGI app, which serves everything under its route) that
streams answers `handle_request` with a `StreamStart`; the proxy pulls the
rest with `stream` (a Ray streaming generator; cancelling it stops the user
code) or lets it go with `close_stream`. A call from the proxy's gRPC port comes to `handle_request` too, marked as one, and
goes to the backend's method of its name (`replica.calling.grpc_calls`; for `protocol = "v2"`,
the v2 gRPC service's, `ray_gitops.v2.grpc_service`). A WebSocket lives in `websocket` (a
streaming generator of what the app sends) and `websocket_message` (what the
client sent), both on this one replica for the connection's lifetime; so
does a gRPC call whose requests stream (client-streaming, bidirectional), given
to its method's session (`GrpcMethods.session`) instead of the app.
Under Ray, the replica also serves the same calls as frames — streams'
rests and WebSockets included, through these same methods — over a private
Unix socket (`replica.data_socket`) for a proxy on its own node, and on TCP
at the node's IP address for proxies on other nodes (opened when the first
of them asks, and authenticated with a secret only `data_address` tells); a
proxy asks `data_address` where they are; it stops listening when draining.
Other replicas' handles (`ray_gitops.serving.handle`) call `handle_call`, which
passes their arguments to the handler as they are. A request (as its last
header, `vocabulary.request_path.deadlines`) or a handle call may carry the
seconds left of its client's deadline: anchored on this process's clock, it
is what `ray_gitops.serving.time_left()` answers and what the handle calls
its code makes inherit; one that comes with no time left is not started,
user code still running at it is cancelled, and either way the answer is a
504 (a handle call: `DeadlineExceeded`), counted in `late_answers`. Before any user code
runs, the replica installs its context and its own handles
(`replica.handles`) for `ray_gitops.serving`, in `ray_gitops.registry`.

A replica given a memory limit (`ray_actor_options.memory`, which Ray itself
only schedules by) caps its own process before user code loads
(`cap_private_memory`): an allocation past it raises MemoryError in the user's
code, and a constructor failing so fails the start as `MemoryLimitExceeded`.

`__init__` stays cheap and never runs user code, so a failing constructor
surfaces as an error from `initialize()` with the user's own text instead of
an actor that dies during creation.

Before user code runs it also stages its backend's models (`replica.models`;
`staging` says how far a fetch is meanwhile) and, for a multiplexed backend,
installs its `[multiplex]` settings: each request's model id is read from
its header (`ray_gitops.registry.begin_models`) and every answer says which models
the replica holds. It installs the sink of an OpenAI backend's token counts too:
the node's file in its model cache directory (`replica.token_stats_file`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import inspect
import logging
import os
import random
import resource
import sys
import tempfile
import time
import traceback
from typing import TYPE_CHECKING, Any, AsyncGenerator, Callable, Iterator

from vocabulary.request_path.wire import (
    TimedRequest,
    CallOutcome,
    CallResult,
    StreamStart,
    WireRequest,
    WireResponse,
)
from replica.data_socket import DataSocket, Serving
from replica.calling.asgi import BodyStream, Lifespan, WebSocketSession, is_asgi_app, serve_http
from replica.calling.conversions import to_reply, to_starlette_request, to_wire_response
from replica.calling.grpc_calls import GrpcMethods
from replica.calling.servicers import load_servicer
from replica.calling.streams import StreamTable
from replica.handles import HandleRouter
from replica.fetching.sources import FetchProgress
from replica.models import DEFAULT_CACHE_DIR, ModelCache, stage_models
from replica.token_stats_file import add_token_counts
from replica.own_output import OwnOutput
from replica.secrets import SecretBox
from datalink.collector import settle_collector
from datalink.frames import MAX_FRAME_BYTES
from vocabulary.request_path.wire import DataAddress
from vocabulary.request_path.grpc_calls import is_grpc_call
from datalink.private_dirs import private_base
from ray_gitops.registry import (
    begin_deadline, begin_models, end_deadline, install, install_models, install_multiplex, install_secrets,
    install_token_sink,
)
from vocabulary.replicas.serving import DeadlineExceeded, ReplicaContext
from vocabulary.request_path.deadlines import DEADLINE_HEADER, Deadline, split_deadline
from vocabulary.spec.backends import BackendConfig
from vocabulary.replicas.replica_output import OutputCursor, ReplicaOutput
from vocabulary.control.status import HandlerError, ModelStaging

if TYPE_CHECKING:  # imported when tracing is on (`__init__`): the OpenTelemetry SDK is 57 ms of a replica's start
    from replica.tracing import Carrier, ReplicaTracing

# A large reply held for the proxy to stream leaves in slices of this size.
_HELD_SLICE_BYTES = 1024 * 1024

# How often the sizes of the replica's output files are noted, for `output(since=...)`.
_MARK_EVERY_S = 2.0

# Long enough for every proxy to receive the replica set without this replica.
_DRAIN_LINGER_S = 1.0

_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]
# What a request whose deadline passed is answered (the proxy answered its client 504 already, or will).
_NOT_STARTED: WireResponse = (504, _TEXT, b"Gateway Timeout: the request's deadline passed before the replica started it")
_DROPPED: WireResponse = (504, _TEXT, b"Gateway Timeout: the request's deadline passed while the replica ran it")

__all__ = ["Replica", "BatchLengthError", "load_callable", "call_handler", "call_batch_handler"]

logger = logging.getLogger(__name__)


class BatchLengthError(Exception):
    """A batched handler returned something other than one result per request."""


class MemoryLimitExceeded(MemoryError):
    """User code allocated past its replica's memory limit (`cap_private_memory`)."""


def private_memory_bytes() -> int | None:
    """This process's private writable memory as Linux counts it for RLIMIT_DATA
    (VmData of /proc/self/status: heap, anonymous mappings and thread stacks,
    counted when mapped, not when touched); None where there is no /proc."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cap_private_memory(limit_bytes: int) -> int | None:
    """Let this process map at most `limit_bytes` more private writable memory
    than it holds now (RLIMIT_DATA's soft limit; the hard one stays); returns
    the cap in bytes, or None where the kernel does not count it (no /proc).

    What the replica host holds before user code (Python, Ray's worker, their
    threads: a few hundred MB) is not the user's to pay for, so the cap is that
    plus the limit. It covers the whole process: Ray's own threads allocate
    under it too, and one of them failing to allocate past it ends the process (the
    controller replaces the replica)."""
    held = private_memory_bytes()
    if held is None:
        return None
    cap = held + limit_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    return cap


def load_callable(
    import_path: str, init_args: tuple[Any, ...], init_kwargs: dict[str, Any]
) -> Any:
    """Import "module:attr" and construct it if it is a class."""
    module_name, sep, attr = import_path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"import_path {import_path!r} must look like 'module:attribute'")
    if "" not in sys.path:
        # The working_dir is the worker's cwd; make it importable like a script's folder.
        sys.path.insert(0, "")
    module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part)
    if inspect.isclass(target):
        return target(*init_args, **init_kwargs)
    if init_args or init_kwargs:
        raise ValueError(f"{import_path} is a function; init_args/init_kwargs are for classes")
    return target


async def call_handler(handler: Callable[..., Any], wire: WireRequest, is_async: bool) -> WireResponse | BodyStream:
    """Run one request through user code; user exceptions propagate. `is_async`:
    `_is_async(handler)`, which a replica asks once, not per request."""
    models = begin_models(wire[3])  # a multiplexed replica: the request's model id (ray_gitops.serving.model_id())
    request = to_starlette_request(wire)
    if is_async:
        result = handler(request)  # an async generator function's result is not awaited
        if inspect.isawaitable(result):
            result = await result
    else:
        # A sync handler runs in a thread so it does not block other requests;
        # the body is read here first because Request.body() needs the loop.
        await request.body()
        result = await asyncio.to_thread(handler, request)
        if inspect.isawaitable(result):
            result = await result
    return await to_reply(result, wire, models)


async def call_batch_handler(handler: Callable[..., Any], wires: list[WireRequest], is_async: bool) -> list[Any]:
    """Run a batched handler once over `wires` (`is_async`: as for `call_handler`);
    its results, one per request.

    User exceptions propagate; a result that is not a list of the same length
    raises `BatchLengthError`, since no request could be matched to its answer.
    """
    requests = [to_starlette_request(wire) for wire in wires]
    for request in requests:
        # Request.body() needs the loop, so a sync handler gets bodies read.
        await request.body()
    if is_async:
        results = await handler(requests)
    else:
        results = await asyncio.to_thread(handler, requests)
        if inspect.isawaitable(results):
            results = await results
    if not isinstance(results, (list, tuple)):
        raise BatchLengthError(
            f"the batch handler returned {type(results).__name__}, not a list with one result per request"
        )
    if len(results) != len(requests):
        raise BatchLengthError(
            f"the batch handler returned {len(results)} results for {len(requests)} requests; "
            "it must return one result per request, in order"
        )
    return list(results)


def _is_async(handler: Callable[..., Any]) -> bool:
    """Called on the loop: a coroutine function, or an async generator function."""
    call = getattr(handler, "__call__", None)  # noqa: B004 — the method is inspected, not callability
    return any(
        inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn) for fn in (handler, call) if fn is not None
    )


async def _call_optional(target: Any, method: str, *args: Any) -> None:
    fn = getattr(target, method, None)
    if fn is None or not callable(fn):
        return
    if inspect.iscoroutinefunction(fn):
        await fn(*args)
    else:
        result = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(result):
            await result


def _converted(result: Any) -> CallResult:
    """One batch result as a response; one unconvertible result fails alone."""
    try:
        return CallOutcome.OK, to_wire_response(result)
    except Exception:  # noqa: BLE001 — e.g. a value that is not JSON-serialisable
        return CallOutcome.ERROR, traceback.format_exc()


def _node_id() -> str:
    import ray

    # Outside Ray (pure tests) placement is unknown; asking the runtime
    # context there would start a local Ray.
    if not ray.is_initialized():
        return ""
    return ray.get_runtime_context().get_node_id()


def _socket_bases() -> list[str]:
    """Where the data socket's private directory may go: this user's private
    base (`datalink.private_dirs`: no other user can swap or enter it, as
    they could Ray's session dir), else the temp dir (a fresh 0700 directory
    under a random name, which the sticky bit keeps ours)."""
    try:
        bases = [private_base().path]
    except PermissionError as error:
        logger.warning("the data socket goes under the temp dir: %s", error)
        bases = []
    return [*bases, tempfile.gettempdir()]


async def _slices(body: bytes) -> AsyncGenerator[bytes, None]:
    for start in range(0, len(body), _HELD_SLICE_BYTES):
        yield body[start : start + _HELD_SLICE_BYTES]


class Replica:
    """One replica of one backend version (a plain class; Ray wraps it)."""

    def __init__(
        self,
        config: BackendConfig,
        replica_id: str,
        *,
        namespace: str = "",
        otlp_endpoint: str | None = None,
        model_cache: tuple[str | None, int | None] = (None, None),
    ) -> None:
        """`config` is the backend as the controller holds it, one value: what the
        replica needs of a backend it reads from there (its code, arguments,
        `user_config`, commit, models, multiplexing, `ray_actor_options.memory`,
        the limit its user code may allocate: `cap_private_memory`). The rest is
        the controller's, not the backend's: `namespace` where it runs, for this
        replica's handles; `otlp_endpoint` where spans go (`replica.tracing`;
        None: tracing off); `model_cache` the node's model cache (its directory,
        its cap in bytes)."""
        self._config = config
        self.backend = backend = config.name
        self.replica_id = replica_id
        self.version = config.version
        self._user_config = config.user_config  # until `reconfigure` brings another
        self._handler: Any = None
        self._handler_is_async = False  # `_is_async(self._handler)`, decided once it is loaded
        self._serve: Callable[[Any, WireRequest], Any] = functools.partial(call_handler, is_async=False)
        self._grpc: GrpcMethods | None = None  # its gRPC methods (replica.calling.grpc_calls), once it is loaded
        self._lifespan: Lifespan | None = None
        self._tracing: ReplicaTracing | None = None
        if otlp_endpoint is not None:
            from replica.tracing import ReplicaTracing

            self._tracing = ReplicaTracing(ReplicaTracing.provider(otlp_endpoint), backend, replica_id, config.commit)
        self._handles = HandleRouter(f"handles:{replica_id}", namespace, random.Random(), self._tracing)
        self._streams = StreamTable(replica_id)
        self._websockets: dict[str, WebSocketSession] = {}
        self._ongoing = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._data: DataSocket | None = None
        self._tcp_host: str | None = None  # where to open the TCP listener when another node's proxy asks
        self._secrets = SecretBox(backend)  # its key never leaves this process (replica.secrets)
        self._latest_error: HandlerError | None = None  # the newest exception user code raised serving a request
        self._shown_at = float("-inf")  # when a handler's traceback was last written to stderr
        self._not_shown = 0  # tracebacks left out since, at most one a second is written
        self._output: OwnOutput | None = None  # this process's stdout and stderr files (under Ray)
        self._marking: asyncio.Task[None] | None = None
        self._fetching: dict[str, FetchProgress] = {}  # models being fetched now, for `staging()`
        self._model_cache_settings = model_cache
        # Requests and handle calls whose deadline passed before they started or while they ran: their
        # answer dropped (the caller answered, or gave up, at that deadline).
        self.late_answers = 0
        self._model_cache: ModelCache | None = None
        # `ray_actor_options.memory`, which Ray only schedules by, the replica enforces.
        memory = config.ray_actor_options.get("memory")
        self._memory_limit: int | None = int(memory) if memory else None
        self._memory_capped = False

    async def secrets_recipient(self) -> str:
        """This replica's age public key, which the controller seals its secrets to."""
        return self._secrets.recipient()

    async def staging(self) -> list[ModelStaging]:
        """The models this replica is fetching before its code starts, and how far
        each is (the controller shows it: `Staging model m: 1.2 / 4.0 GB on 2 nodes`)."""
        node = _node_id() if self._fetching else ""
        return [
            ModelStaging(model=name, node_id=node, done_bytes=progress.done, total_bytes=progress.total)
            for name, progress in list(self._fetching.items())
        ]

    async def update_secrets(self, sealed: bytes) -> None:
        """New values (a rotation), sealed to `secrets_recipient()`: held at
        once, then the class's `reconfigure_secrets()` runs if it has one."""
        if self._secrets.open(sealed) and self._handler is not None:
            await _call_optional(self._handler, "reconfigure_secrets")

    async def initialize(self, secrets: bytes | None = None) -> str:
        """Load, construct, configure and health-check the user code; `secrets`
        (sealed to `secrets_recipient()`) are opened before any user code runs.

        Idempotent once it succeeded (the controller calls it again after its
        own restart). Returns the node id, so the controller learns placement
        from the same call that tells it the replica is ready.
        """
        if secrets is not None:
            self._secrets.open(secrets)
        if self._handler is None:
            models = self._config.model_sources  # staged before user code runs (replica.models)
            if models and self._model_cache is None:
                # Before any user code, bounded by each model's load_timeout_s: a model that
                # cannot be fetched or verified fails the start with one line (replica.models).
                self._model_cache, staged = await stage_models(
                    models, *self._model_cache_settings, fetching=self._fetching, secret=self._secrets.value
                )
                install_models({done.name: str(done.path) for done in staged})
            elif not models:
                install_models({})
            install_secrets(self._secrets)
            # An OpenAI backend's token counts go to the node's file, which its proxies export.
            install_token_sink(functools.partial(
                add_token_counts, self._model_cache_settings[0] or DEFAULT_CACHE_DIR, self.backend
            ))
            multiplex = self._config.multiplex  # for `@ray_gitops.serving.multiplexed`
            if multiplex is not None:
                install_multiplex(
                    multiplex.header, multiplex.max_models_per_replica, multiplex.id_rule().accepts, multiplex.accepted()
                )
            self._handles.attach(asyncio.get_running_loop())
            install(ReplicaContext(self.backend, self.replica_id, self.version, self._config.commit), self._handles)
            if self._memory_limit is not None and not self._memory_capped:
                cap_private_memory(self._memory_limit)  # after staging: the model cache's buffers are ours
                self._memory_capped = True
            try:
                handler = await asyncio.to_thread(self._load_user_code)
            except MemoryError as err:
                if self._memory_limit is None:
                    raise
                raise MemoryLimitExceeded(
                    f"{self._config.import_path} allocated past the replica's memory limit "
                    f"(ray_actor_options.memory = {self._memory_limit} bytes) in its constructor"
                ) from err
            if self._user_config is not None:
                await _call_optional(handler, "reconfigure", self._user_config)
            # Not ready until healthy: a version whose check_health always
            # raises must never receive traffic.
            await _call_optional(handler, "check_health")
            self._handler_is_async = _is_async(handler)
            if is_asgi_app(handler):
                # An ASGI app serves everything under its route itself, after its startup.
                lifespan = Lifespan(handler)
                await lifespan.start()
                self._lifespan, self._serve = lifespan, serve_http
            else:
                self._serve = functools.partial(call_handler, is_async=self._handler_is_async)
            self._handler = handler
            # A v2 backend's gRPC calls are the protocol's service's (ray_gitops.v2.grpc_service), not its model's methods.
            # A backend naming a generated servicer (`grpc_servicer`) serves its methods, as grpcio calls them.
            servicer = None if self._config.grpc_servicer is None else load_servicer(self._config.grpc_servicer, handler)
            self._grpc = GrpcMethods(handler if self._config.protocol is None else handler.grpc_service, servicer)
            import ray

            # Only under Ray can a proxy find the socket; tests of this class run without one.
            if ray.is_initialized():
                self._output = OwnOutput()
                self._output.mark(time.time())
                self._marking = asyncio.get_running_loop().create_task(self._mark_output())
                await self.serve_frames(_socket_bases())
                # Other nodes' proxies reach this node at the address Ray knows it by,
                # once one asks: a one-node cluster never listens on TCP.
                self._tcp_host = ray.util.get_node_ip_address()
                # What start-up made (Ray, the user's code and model) lives as long as the replica.
                settle_collector()
        return _node_id()

    def _load_user_code(self) -> Any:
        """The backend's callable; for `protocol = "v2"`, the v2 app around its model class."""
        config = self._config
        target = load_callable(config.import_path, tuple(config.init_args), dict(config.init_kwargs))
        if config.protocol is None:
            return target
        from ray_gitops.v2.app import V2App  # numpy and the v2 codec: loaded by v2 backends only

        return V2App.around(target, config)

    async def serve_frames(
        self, bases: list[str], max_frame: int = MAX_FRAME_BYTES, tcp_host: str | None = None
    ) -> str | None:
        """Serve requests as frames on a Unix socket in a new private directory
        under the first of `bases` that fits, and, given `tcp_host`, on TCP
        there for other nodes' proxies at once; the socket's path, or None (Ray
        only). `initialize` does this under Ray, and leaves the TCP listener to
        `data_address`."""
        if self._data is None:
            self._data = DataSocket(
                Serving(
                    self.handle_request, self.handle_batch, self._hold,
                    self.stream, self.close_stream, self.websocket, self.websocket_message,
                    self._secrets.redact,
                ),
                max_frame,
            )
        path = await self._data.start(bases)
        if tcp_host is not None:
            await self._data.start_tcp(tcp_host)
        return path

    async def data_address(self, for_node: str | None = None) -> DataAddress | None:
        """Where this replica serves frames (node id, Unix socket path, TCP
        address and its secret: asked over Ray, the control plane, only), or
        None when it does not (not initialized, draining, unsupported). Asked
        for a proxy on another node (`for_node`, its node id), it opens its TCP
        listener first, at the node's address, unless it is draining."""
        if self._data is None:
            return None
        node = _node_id()
        if for_node is not None and for_node != node and self._tcp_host is not None:
            await self._data.start_tcp(self._tcp_host)
        return self._data.address(node)

    def data_connections(self) -> dict[str, int]:
        """Data connections served so far, by "unix" and "tcp" (proven ones only)."""
        return {"unix": 0, "tcp": 0} if self._data is None else dict(self._data.accepted)

    def frames_served(self) -> int:
        """Requests answered over the data socket so far (each batch item counts)."""
        return 0 if self._data is None else self._data.served

    def frames_streamed(self) -> int:
        """Streams and WebSockets served over the data socket so far."""
        return 0 if self._data is None else self._data.streamed

    def _hold(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> StreamStart:
        return StreamStart(status, headers, b"", self._streams.hold(_slices(body)))

    async def handle_request(self, wire: WireRequest) -> WireResponse | StreamStart:
        headers = wire[3]
        if headers and headers[-1][0] == DEADLINE_HEADER:  # a client's deadline came with it
            return await self._within_deadline(wire)
        return await self._handle_request(wire)

    async def _within_deadline(self, wire: WireRequest) -> WireResponse | StreamStart:
        """A request that carries the seconds left of its deadline: refused (504) when none are, else run
        with that deadline (`ray_gitops.serving.time_left()`, inherited by its handle calls) and cancelled at
        it; an answer past it is dropped for a 504 (the proxy has answered the client by then)."""
        wire, left = split_deadline(wire)
        assert left is not None
        if left <= 0:
            self.late_answers += 1
            return _NOT_STARTED
        token = begin_deadline(Deadline.after(left, time.monotonic()))
        try:
            async with asyncio.timeout(left) as within:
                return await self._handle_request(wire)
        except TimeoutError:
            if not within.expired():
                raise
        except DeadlineExceeded:  # a handle call of its code ran out the same deadline
            pass
        finally:
            end_deadline(token)
        self.late_answers += 1
        return _DROPPED

    async def _handle_request(self, wire: WireRequest) -> WireResponse | StreamStart:
        # `_serving`'s counting, spelt out: the context manager costs more than a noop request.
        self._begin(1)
        try:
            if self._grpc is not None and is_grpc_call(wire):  # a call from the proxy's gRPC port
                if self._tracing is None:
                    reply = await self._grpc.call(wire)
                else:
                    reply = await self._tracing.serve(wire, functools.partial(self._grpc.call, wire))
            elif self._tracing is None:
                reply = await self._serve(self._handler, wire)
            else:
                reply = await self._tracing.serve(wire, functools.partial(self._serve, self._handler, wire))
        except Exception as error:
            self._raised(error)
            hidden = self._secrets.hiding(error)
            if hidden is not None:
                raise hidden from None
            raise
        finally:
            self._end(1)
        if isinstance(reply, BodyStream):
            return StreamStart(reply.status, reply.headers, reply.first_chunk, self._streams.hold(reply.rest))
        return reply

    async def stream(self, stream_id: str) -> AsyncGenerator[bytes, None]:
        """The rest of a streaming answer, chunk by chunk (a Ray streaming
        generator); cancelling the call closes the stream and stops user code."""
        rest = self._streams.claim(stream_id)
        if rest is None:
            raise LookupError(f"replica {self.replica_id} holds no stream {stream_id} (it waited too long)")
        with self._serving(1):
            try:
                async for chunk in rest:
                    yield chunk
            except Exception as error:
                self._raised(error)
                raise
            finally:
                await rest.aclose()

    def close_stream(self, stream_id: str) -> None:
        """Let a streaming answer go unread (a shadow copy's)."""
        self._streams.close(stream_id)

    async def websocket(self, websocket_id: str, wire: WireRequest) -> AsyncGenerator[dict[str, Any], None]:
        """A WebSocket to the app: yields what it sends (accept, messages,
        close) until it closes; cancelling the call stops the app."""
        if self._handler is None:
            raise RuntimeError(f"replica {self.replica_id} is not initialized")
        # A gRPC call whose requests stream rides a session too, to its method (replica.calling.grpc_calls).
        app = self._grpc.session if self._grpc is not None and is_grpc_call(wire) else self._handler
        session = self._websockets[websocket_id] = WebSocketSession(app, wire)
        with self._serving(1):
            try:
                async for message in session.outbound():
                    yield message
            finally:
                del self._websockets[websocket_id]

    async def websocket_message(self, websocket_id: str, message: dict[str, Any]) -> bool:
        """A message from the client of `websocket_id`, answered once the app's
        queue has room for it (the proxy reads the client's next message only
        then); False when that WebSocket is gone."""
        session = self._websockets.get(websocket_id)
        if session is None:
            return False
        await session.push(message)
        return True

    @contextlib.contextmanager
    def _serving(self, requests: int) -> Iterator[None]:
        """Count `requests` in flight (draining waits for them) around user code."""
        self._begin(requests)
        try:
            yield
        finally:
            self._end(requests)

    def _begin(self, requests: int) -> None:
        if self._handler is None:
            raise RuntimeError(f"replica {self.replica_id} is not initialized")
        self._ongoing += requests
        self._idle.clear()

    def _end(self, requests: int) -> None:
        self._ongoing -= requests
        if self._ongoing == 0:
            self._idle.set()

    async def handle_call(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], trace: Carrier | None = None,
        deadline_s: float | None = None,
    ) -> Any:
        """A handle's call: the arguments go to the handler as they are, and
        its return value goes back as it is; user exceptions propagate.
        `trace`: the caller's trace context (`replica.tracing`), when it traces;
        `deadline_s`: the seconds left of the caller's deadline, when it has one: the call is
        not started when none are, and is cancelled when they run out (`DeadlineExceeded` either way)."""
        if deadline_s is not None:
            return await self._call_within(args, kwargs, trace, deadline_s)
        if self._tracing is not None and trace is not None:
            return await self._tracing.called(trace, functools.partial(self._call_handler, args, kwargs))
        return await self._call_handler(args, kwargs)

    async def _call_within(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], trace: Carrier | None, left: float
    ) -> Any:
        if left <= 0:
            self.late_answers += 1
            raise DeadlineExceeded(f"replica {self.replica_id}: the caller's deadline passed before the call started")
        token = begin_deadline(Deadline.after(left, time.monotonic()))
        try:
            async with asyncio.timeout(left) as within:
                return await self.handle_call(args, kwargs, trace)
        except TimeoutError:
            if not within.expired():
                raise
        finally:
            end_deadline(token)
        self.late_answers += 1
        raise DeadlineExceeded(
            f"replica {self.replica_id}: the caller's deadline ({left:.3f} s left when the call came) passed; "
            "the call was cancelled"
        )

    async def _call_handler(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with self._serving(1):
            handler = self._handler
            try:
                if self._handler_is_async:
                    return await handler(*args, **kwargs)
                result = await asyncio.to_thread(handler, *args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                return result
            except Exception as error:
                self._raised(error)
                raise

    async def handle_batch(self, batch: list[TimedRequest]) -> list[CallResult]:
        """A batched backend's requests in one handler call, answered in order.

        The call may run as long as the longest-lived request allows; a
        request whose own time runs out first is answered by the proxy. A
        failure (user code raised, a wrong-length result, the time ran out)
        is every request's answer: they shared one call.
        """
        limit_s = max(limit for _, limit in batch)
        with self._serving(len(batch)):
            try:
                results = await asyncio.wait_for(
                    call_batch_handler(self._handler, [wire for wire, _ in batch], self._handler_is_async), limit_s
                )
            except TimeoutError:
                return [(CallOutcome.TIMEOUT, "")] * len(batch)
            except BatchLengthError as error:
                text = self._secrets.redact(f"backend {self.backend}: {error}")
                logger.error("%s", text)
                return [(CallOutcome.ERROR, text)] * len(batch)
            except Exception as error:  # noqa: BLE001 — user code may raise anything; the proxy logs it
                self._raised(error)
                return [(CallOutcome.ERROR, self._secrets.redact(traceback.format_exc()))] * len(batch)
        return [self._redacted(_converted(result)) for result in results]

    def _redacted(self, result: CallResult) -> CallResult:
        """A result whose error text (a traceback) leaves this replica with no secret value in it."""
        outcome, payload = result
        return (outcome, self._secrets.redact(payload)) if outcome is CallOutcome.ERROR and isinstance(payload, str) else result

    async def handle_coalesced(self, items: list[TimedRequest]) -> list[CallResult]:
        """Several requests in one Ray call, answered in order.

        The proxy coalesces requests queued for this replica under load, so
        one Ray call carries many. Each runs concurrently under its own time
        limit (cancelled when it runs out, as a timed-out single call is),
        and one item's failure never affects another's.
        """
        return list(await asyncio.gather(*(self._coalesced_item(wire, limit_s) for wire, limit_s in items)))

    async def _coalesced_item(self, wire: WireRequest, limit_s: float) -> CallResult:
        try:
            return CallOutcome.OK, await asyncio.wait_for(self.handle_request(wire), limit_s)
        except TimeoutError:
            return CallOutcome.TIMEOUT, ""
        except Exception:  # noqa: BLE001 — user code may raise anything; the proxy logs it
            return CallOutcome.ERROR, self._secrets.redact(traceback.format_exc())  # kept as the latest error too

    async def reconfigure(self, user_config: Any) -> None:
        self._user_config = user_config
        if self._handler is not None:
            await _call_optional(self._handler, "reconfigure", user_config)

    async def check_health(self) -> HandlerError | None:
        """Runs the user's check; answers the latest exception a handler raised (None: none
        yet), so the controller shows it in the backend's status."""
        if self._handler is None:
            raise RuntimeError(f"replica {self.replica_id} is not initialized")
        await _call_optional(self._handler, "check_health")
        return self._latest_error

    def _raised(self, error: Exception) -> None:
        """Keep `error`, raised by user code, as this replica's latest handler error, and
        write its traceback to this replica's stderr (`gitops logs`), at most once a second."""
        latest = HandlerError.of(error, self.replica_id, time.time(), os.getcwd())
        self._latest_error = latest.model_copy(update={"message": self._secrets.redact(latest.message)})
        now = time.monotonic()
        if now - self._shown_at < 1.0:
            self._not_shown += 1
            return
        left_out = f" ({self._not_shown} more left out since the last one)" if self._not_shown else ""
        self._shown_at, self._not_shown = now, 0
        sys.stderr.write(self._secrets.redact(
            f"backend {self.backend} replica {self.replica_id}: a request's handler raised{left_out}\n"
            + "".join(traceback.format_exception(error))
        ))
        sys.stderr.flush()

    async def output(self, since: float | None = None, cursor: OutputCursor | None = None) -> ReplicaOutput:
        """This replica's own stdout and stderr lines: after `cursor`, or written since
        `since` (wall-clock seconds), or the last few kilobytes."""
        if self._output is None:
            self._output = OwnOutput()
        read = self._output.read(self.replica_id, _node_id(), since, cursor)
        return read.model_copy(update={
            "out": tuple(self._secrets.redact(line) for line in read.out),
            "err": tuple(self._secrets.redact(line) for line in read.err),
        })

    async def _mark_output(self) -> None:
        """Note the output files' sizes every few seconds, for `output(since=...)`."""
        while True:
            if self._output is not None:
                self._output.mark(time.time())
            await asyncio.sleep(_MARK_EVERY_S)

    async def prepare_for_shutdown(self, timeout_s: float) -> None:
        """Wait for in-flight requests to finish, at most `timeout_s`.

        First linger briefly: proxies may still route a request here until
        the long poll tells them this replica left, and those must be served.
        """
        deadline = time.monotonic() + max(timeout_s, 0.0)
        # New proxies connect no more; open connections are served to the end.
        if self._data is not None:
            self._data.stop_listening()
        await asyncio.sleep(min(_DRAIN_LINGER_S, max(timeout_s, 0.0)))
        try:
            await asyncio.wait_for(self._idle.wait(), timeout=max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            pass
        if self._lifespan is not None:
            await self._lifespan.stop()
            self._lifespan = None
        self._secrets.close()
        if self._model_cache is not None:
            self._model_cache.release()
        if self._tracing is not None:
            await asyncio.to_thread(self._tracing.shutdown)  # its last spans go out before Ray kills it

    def num_ongoing(self) -> int:
        return self._ongoing

    def ready(self) -> str:
        """Cheap liveness probe that never touches user code."""
        return self.replica_id
