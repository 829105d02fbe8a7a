"""The proxy actor: `httpedge.server` serving `ProxyApp` inside an async Ray actor.

A few per Ray node (its proxy workers), created, pinned and replaced by the
controller (which wraps this plain class with `ray.remote`); each is one
proxy to the controller, under its own proxy id. Given `shared_dir` (the
controller passes the node's, named by the Ray session, namespace and node:
it names the group of workers), the node's workers share the HTTP port and
the metrics port (SO_REUSEPORT, claimed for this group of workers by
`proxy.shell.shared_ports`) and record metrics and shadow mismatches into the
group's directory under this user's private base (`shared_ports.group_dir`), so a scrape of any
worker answers the node's sum, and its `shadow_mismatches` (a Ray call:
the agent's, never on the public port) the node's mismatches
(`proxy.observability.node_mismatches`). The constructor binds the listening
socket (so a taken port fails the actor's creation with a clear error) and
starts tasks on the actor's event loop: the HTTP server, the long poll, the
load reports and, given a metrics port, the metrics' load sampler; given a
gRPC port (`gitops run --grpc-port`), grpcio's server on it (`proxy.grpc_ingress`),
shared by the node's workers as the HTTP port is. The
server is our lean HTTP/1.1 one, bounded at the socket (header size and
time, connection cap: `max_connections`, for which the constructor raises
the process's open-files limit as far as the hard limit allows) and handing WebSockets to uvicorn's. The
constructor also puts the process back at normal CPU priority, which Ray
lowers for every worker, where the node allows it, and turns core dumps off
(`hardening.core_dumps`: a worker holds the data link's handshake secrets
and clients' credentials in flight). Owns the proxy's lifecycle only; the request path is `proxy.app`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import resource
import socket
from typing import TYPE_CHECKING, Any, Callable, Coroutine

from datalink.collector import settle_collector
from hardening.core_dumps import no_core_dumps
from httpedge.server import Server

from proxy.app import ProxyApp
from proxy.routes.snapshot import Snapshot
from proxy.shell.controller_link import ControllerLink
from proxy.shell.load_reporting import report_load_forever
from proxy.shell.longpoll_client import LongPollClient
from proxy.shell import shared_ports
from proxy.observability.metrics import ProxyMetrics, use_multiprocess_dir
from proxy.observability.node_mismatches import NodeMismatchLog
from proxy.shell.raycalls import RayCaller
from proxy.settings import ProxySettings
from proxy.shell.shared_buckets import SharedBuckets
from proxy.observability.tracing import RequestTracing, SpansSent, exporting_tracer
from proxy.observability.capture import CaptureWriter
from proxy.routes.subscriptions import Subscriptions
from vocabulary.control.goal_api import proxy_id

if TYPE_CHECKING:
    import grpc.aio

__all__ = ["ProxyActor"]

logger = logging.getLogger(__name__)

_READY_POLL_S = 0.01
# Descriptors a worker needs besides its clients': replica connections, Ray's
# own, the metrics listener, log files.
_SPARE_DESCRIPTORS = 1024
_SHUTDOWN_GRACE_S = 5.0


class ProxyActor:
    """One node's proxy: HTTP in, replica calls out, config by long poll from the controller."""

    def __init__(
        self,
        controller_name: str,
        namespace: str,
        node_id: str,
        host: str,
        port: int,
        settings: ProxySettings | None = None,
        metrics_port: int | None = None,
        worker: int = 0,
        shared_dir: str | None = None,
        model_cache_dir: str | None = None,
        otlp_endpoint: str | None = None,
        max_connections: int | None = None,
        grpc_port: int | None = None,
    ) -> None:
        """`max_connections`: open connections this worker holds (None: the settings' edge says);
        `grpc_port`: serve gRPC there too, on `host` (None: no gRPC port)."""
        no_core_dumps()  # it holds the data link's handshake secrets and clients' credentials in flight
        settings = settings or ProxySettings()
        if max_connections is not None:
            settings = dataclasses.replace(settings, edge=dataclasses.replace(settings.edge, max_connections=max_connections))
        _allow_descriptors(settings.edge.max_connections)
        _normal_priority()
        rng = random.Random()
        me = proxy_id(node_id, worker)
        # `shared_dir` names the node's group of workers; their shared files live in this user's private base.
        files = shared_ports.group_dir(shared_dir) if shared_dir is not None else None
        # Prometheus scrapes each node on its metrics port; with shared_dir, any worker answers the node's sum.
        self._metrics = (
            _serve_metrics(host, metrics_port, files, model_cache_dir) if metrics_port is not None else None
        )
        self._capture = CaptureWriter(me, rng, self._metrics.capture_record if self._metrics is not None else None)
        self._app = ProxyApp(
            RayCaller(
                settings.max_calls_per_replica,
                settings.coalesce_window_s,
                self._metrics.batch_sent if self._metrics is not None else None,
            ),
            settings,
            rng,
            self._metrics,
            _node_mismatches(files) if files is not None else None,
            SharedBuckets(files) if files is not None else None,
            _tracing(otlp_endpoint, rng, self._metrics.spans_sent if self._metrics is not None else None),
            self._capture,
        )
        link = ControllerLink(controller_name, namespace)
        configured = asyncio.Event()
        longpoll = LongPollClient(link, me, Subscriptions(settings, rng), _noting(self._install, configured), settings)
        self._socket = _bind(host, port, shared_dir)
        self._host = host
        self._port = self._socket.getsockname()[1]
        self._server = _http_server(self._app, settings)
        loop = asyncio.get_event_loop()
        serving = self._server.serve(sockets=[self._socket])
        # A worker sharing the port listens (joins the kernel's spread) only once it can route: a replacement
        # that listened at once would answer its share of new connections 503 until its first route table.
        self._server_task = loop.create_task(_after(configured, serving) if shared_dir is not None else serving)
        # The gRPC port (proxy.grpc_ingress) joins the node's workers' spread like the HTTP port: once routed.
        self._grpc: grpc.aio.Server | None = None
        self._grpc_port = grpc_port
        self._grpc_task: asyncio.Task[None] | None = None
        if grpc_port is not None:
            import proxy.grpc_ingress  # noqa: F401 — grpcio (about 7 MB) only in a proxy with a gRPC port, loaded before settle_collector()

            starting = self._serve_grpc(host, grpc_port, settings, shared_dir is not None)
            self._grpc_task = loop.create_task(_after(configured, starting) if shared_dir is not None else starting)
        self._background = [
            loop.create_task(longpoll.run()),
            loop.create_task(
                report_load_forever(
                    link, me, self._app.backend_load, settings.load_report_interval_s, self._app.request_stats,
                    self._app.endpoint_request_stats, self._app.stalled_replicas, self._app.ejected_replicas,
                )
            ),
        ]
        if self._metrics is not None:
            self._background.append(loop.create_task(self._metrics.sample_load_forever(self._app.backend_load)))
        # What start-up made (Ray, the server, the metrics) lives as long as the proxy.
        settle_collector()

    async def _serve_grpc(self, host: str, port: int, settings: ProxySettings, shared: bool) -> None:
        from proxy.grpc_ingress import serve_grpc  # imported already, before settle_collector() (see __init__)

        self._grpc, self._grpc_port = await serve_grpc(self._app, host, port, settings.grpc, shared)

    def _install(self, snapshot: Snapshot) -> None:
        self._app.install(snapshot)
        if self._metrics is not None:
            self._metrics.retain(snapshot.endpoints, snapshot.pools)

    async def ready(self) -> str:
        """Returns `host:port` once the HTTP server listens (and the gRPC port, if any); raises if either failed."""
        while not self._server.started:
            if self._server_task.done():
                self._server_task.result()
                raise RuntimeError(f"proxy HTTP server on {self._host}:{self._port} stopped before it started")
            await asyncio.sleep(_READY_POLL_S)
        if self._grpc_task is not None:
            await asyncio.shield(self._grpc_task)  # raises the gRPC server's failure to start (its port taken)
        return f"{self._host}:{self._port}"

    async def grpc_address(self) -> str | None:
        """`host:port` of the gRPC port once it listens; None when this proxy serves no gRPC."""
        if self._grpc_task is None:
            return None
        await asyncio.shield(self._grpc_task)
        return f"{self._host}:{self._grpc_port}"

    async def shadow_mismatches(self) -> list[dict[str, Any]]:
        """The newest shadow mismatches of this node's proxy workers, newest first (for the agent)."""
        return [mismatch.to_json() for mismatch in self._app.mismatches.recent()]

    async def ping(self) -> int:
        """The controller's liveness check: answers this proxy's process id,
        so a restart (a new process) shows as a new answer."""
        return os.getpid()

    async def shutdown(self) -> None:
        """Stop polling, let in-flight requests finish (bounded), close the socket."""
        for task in self._background:
            task.cancel()
        await self._server.shutdown(_SHUTDOWN_GRACE_S)
        if self._grpc is not None:
            await self._grpc.stop(_SHUTDOWN_GRACE_S)
        await self._app.stop_shadows()
        await asyncio.to_thread(self._capture.close)  # the records queued are written
        self._socket.close()
        if self._metrics is not None:
            self._metrics.close()


def _node_mismatches(shared_dir: str) -> NodeMismatchLog:
    shared_ports.private_dir(shared_dir)
    return NodeMismatchLog(shared_dir)


def _serve_metrics(host: str, port: int, shared_dir: str | None, model_cache_dir: str | None) -> ProxyMetrics:
    if shared_dir is not None:
        use_multiprocess_dir(shared_dir)  # before the metrics exist: they pick their storage when made
    metrics = ProxyMetrics(model_cache_dir)
    metrics.serve(host, port)
    return metrics


def _http_server(app: ProxyApp, settings: ProxySettings) -> Server:
    # Served on the actor's own event loop; the hot path writes no access
    # log. WebSockets go on to proxy.pipeline.websockets through uvicorn's protocol.
    return Server(app, settings.edge, websockets=True)


def _noting(install: Callable[[Snapshot], None], configured: asyncio.Event) -> Callable[[Snapshot], None]:
    """`install`, then `configured` set from the first complete snapshot on."""

    def installing(snapshot: Snapshot) -> None:
        install(snapshot)
        if snapshot.complete:
            configured.set()

    return installing


async def _after(event: asyncio.Event, work: Coroutine[Any, Any, None]) -> None:
    try:
        await event.wait()
    except BaseException:
        work.close()
        raise
    await work


def _normal_priority() -> None:
    """Every thread of this process back to the normal CPU priority (nice 0), where the node allows it.

    Ray starts each worker at nice 15 (`RAY_worker_niceness`) so that its own
    daemons come first; a proxy is on every request's path, and at nice 15 it
    waits behind any other busy process of the node. Linux keeps a nice value
    per thread, so each one (the event loop's, Ray's gRPC and I/O threads)
    is set; threads started later inherit it. Lowering the value needs root
    or CAP_SYS_NICE: without them the proxy stays where Ray put it."""
    for task in os.listdir("/proc/self/task"):
        try:
            if os.getpriority(os.PRIO_PROCESS, int(task)) > 0:
                os.setpriority(os.PRIO_PROCESS, int(task), 0)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
        except PermissionError:
            logger.info("proxy: stays at Ray's worker priority (nice 15): lowering it needs root or CAP_SYS_NICE")
            return


def _allow_descriptors(connections: int) -> None:
    """Raise this process's soft limit on open files so `connections` clients fit,
    as far as the hard limit allows (beyond it, `accept` fails and the kernel
    queues, then refuses, new connections); says so when it falls short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + _SPARE_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < wanted:
            logger.warning("proxy: %d connections asked for, but open files are limited to %d (ulimit -Hn)",
                           connections, raised)


def _bind(host: str, port: int, shared_dir: str | None) -> socket.socket:
    """The listening socket; with `shared_dir`, shared by the node's workers (SO_REUSEPORT), and
    claimed for them for this process's life: a port another agent's proxies share is refused, not joined."""
    try:
        if shared_dir is not None:
            shared_ports.claim(host, port, shared_dir)  # held until the process exits
        sock = shared_ports.bind(host, port, shared_dir)
    except OSError as error:
        raise OSError(f"proxy cannot listen on {host}:{port}: {error.strerror or error}") from None
    # Not inheritable (Python's default, kept): a child that held it would keep it in the port's group after this
    # worker died, and the kernel would go on queuing connections on it that nobody accepts.
    return sock


def _tracing(otlp_endpoint: str | None, rng: random.Random, sent: SpansSent | None) -> RequestTracing | None:
    """The request spans, exported to `otlp_endpoint` (`gitops run --otlp-endpoint`); None: off."""
    if otlp_endpoint is None:
        return None
    return RequestTracing(exporting_tracer(otlp_endpoint, "gitops-proxy", sent), rng)
