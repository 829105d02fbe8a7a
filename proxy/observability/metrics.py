"""The proxy's Prometheus metrics and the port they are scraped from.

Owned here: the names, labels and buckets of the data-plane metrics of
docs/reference/metrics.md ("Proxy": `gitops_http_requests_total`,
`gitops_http_request_duration_seconds`, `gitops_shadow_requests_total`,
`gitops_shadow_comparisons_total`, `gitops_backend_ongoing_requests`, `gitops_batch_size`,
`gitops_http_time_to_first_byte_seconds`, `gitops_http_rate_limited_total`,
`gitops_stream_inter_chunk_seconds`, `gitops_stream_chunks`,
`gitops_capture_records_total`, `gitops_proxy_trace_spans_total`,
`gitops_proxy_retries_total`, `gitops_proxy_retry_budget_exhausted_total`,
`gitops_proxy_outlier_ejections_total`, `gitops_proxy_ejected_replicas`,
`gitops_proxy_circuit_open_total`, `gitops_proxy_deadline_exceeded_total`, per model of a
multiplexed backend `gitops_model_requests_total`, `gitops_model_loads_total`,
`gitops_model_evictions_total`, and per tenant of a token budget
`gitops_tenant_tokens_admitted_total`, `gitops_tenant_tokens_charged_total`,
`gitops_tenant_token_limited_total`), and serving them, with the node's model cache metrics
(`proxy.observability.model_metrics`) and LLM token metrics (`proxy.observability.token_metrics`),
both read from files the node's replicas write. Not here: when a
request counts as finished (the proxy's request path calls
`request_finished` from exactly one place, `proxy.pipeline.websockets` calls
`session_finished` once per WebSocket).

WebSockets: a session is one request in `gitops_http_requests_total`,
counted when it ends, with the code `proxy.pipeline.websockets` gives it (101 for a
session the app accepted); its lifetime is never a request duration (it
would swamp the latency histogram), its time to accept is its time to first
byte, and while open it holds a replica slot, so it is in the ongoing gauge.

How they reach Prometheus: a node runs several proxy workers (processes),
and Prometheus scrapes the node once, on its one metrics port. Each worker
records into files of a private per-node directory (prometheus_client's
multiprocess mode: `use_multiprocess_dir` before any `ProxyMetrics` is
made; the controller names the directory, inside the Ray session's own
directory), and each serves the port (`serve(host, port)`, SO_REUSEPORT
shared with the node's other workers) answering with the sum over the directory:
whichever worker answers a scrape, the numbers are the whole node's, not
one worker's. Counters and histograms of a worker that died stay in its
files, so the node's counters never go backwards when a worker is replaced;
the in-flight gauge counts live workers only (`livesum`: a dead worker's
gauge file is removed at the next scrape or worker start). The node's
counts live as long as one of its workers does: a worker that starts when
no worker of the group is alive (a new agent, a new Ray session, or the
only worker restarted) starts the node from zero, as any new process's
counters do, and never inherits an earlier agent's requests. Without a
directory (unit tests) the metrics are this process's alone.

Deleted series: prometheus_client cannot remove a series from the files, so
a served scrape leaves out every series of an endpoint or backend this
worker no longer serves (`retain`); the files keep it, and a re-created
backend resumes its counts rather than going backwards.

Wiring in the proxy actor: given `metrics_port` (the controller passes
`gitops run --proxy-metrics-port`), create one `ProxyMetrics`, call
`serve(host, metrics_port)`, hand it to `ProxyApp` as its recorder (it has
`request_done`/`shadow_done`), run `sample_load_forever(app.backend_load)`
as a task on the actor's loop, and `close()` on shutdown.

Cost: `request_finished` runs once per request, so the labelled children are
resolved once per (endpoint, backend, code) and cached; a finished request
is two dict lookups, one counter increment and one histogram observation.
A finished WebSocket session is one dict lookup and one increment; a time to
first byte one lookup and one observation (children cached the same way,
dropped with the endpoint or backend).

Tenants: the token budget's counters are labelled by tenant, its label 8 hex
digits of the hashed key (`proxy.routes.token_budgets.tenant_label`), never
the key; each worker gives its own label to the first `TENANT_LABELS`
tenants of an endpoint it sees and counts any other as `other`, so an
endpoint has at most `TENANT_LABELS` × workers tenant series per counter.

Cardinality per endpoint × backend pair: one request counter per status
code seen (a handful), one histogram (len(REQUEST_BUCKETS) + 3 series), one
shadow counter per result (<= 4); plus one ongoing gauge per backend.
"""

from __future__ import annotations

import asyncio
import enum
import fcntl
import glob
import os
import socket
import threading
import warnings
import gzip
from typing import Any, Callable, Collection, Iterable, Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.exposition import choose_encoder

from httpedge.limits import EdgeLimits
from httpedge.server import Server
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from proxy.shell import shared_ports
from proxy.observability.model_metrics import register_model_metrics
from proxy.observability.token_metrics import register_token_metrics

__all__ = [
    "DEFAULT_METRICS_PORT",
    "MULTIPROCESS_ENV",
    "REQUEST_BUCKETS",
    "ProxyMetrics",
    "ShadowResult",
    "use_multiprocess_dir",
    "worker_alive",
]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

# The text format exposes every counter's and histogram's creation time as an
# extra `<name>_created` gauge series that Prometheus stores but nothing here
# queries; it would double the series count. The switch is process-wide, and
# the processes exporting these metrics export nothing else.
disable_created_metrics()

# The proxy's traffic port is 8000 and the agent's admin port 8001 by default.
DEFAULT_METRICS_PORT = 8002

# From a cached in-process reply (sub-millisecond) through one Ray call
# (~1-50 ms measured) to slow model handlers and endpoint timeouts (seconds).
REQUEST_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

# Requests one batched handler call receives (`max_batch_size` >= 1).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

REQUEST_LABELS = ("endpoint", "backend", "code")
DURATION_LABELS = ("endpoint", "backend")
SHADOW_LABELS = ("endpoint", "backend", "result")
COMPARISON_LABELS = ("endpoint", "backend", "result")
ONGOING_LABELS = ("backend",)
BATCH_LABELS = ("backend",)
LIMITED_LABELS = ("endpoint",)
TENANT_LABELS_NAMES = ("endpoint", "tenant")
# Tenants of one endpoint a worker labels by their own hash; the rest are counted as 'other'.
TENANT_LABELS = 64
OTHER_TENANT = "other"
# A multiplexed backend's models: only ids its spec lists (and a replica loaded) become labels; others are 'other'.
MODEL_LABELS = ("backend", "model")
# Between two chunks of a streamed answer: one output token of an LLM (a few ms
# to ~100 ms) up to a slow producer's pause.
INTER_CHUNK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
# Chunks one streamed answer sent: about its output tokens for a token stream.
CHUNK_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class ShadowResult(enum.StrEnum):
    """The bounded set of `result` values of `gitops_shadow_requests_total`."""

    OK = "ok"
    ERROR = "error"
    DROPPED = "dropped"
    TIMEOUT = "timeout"


def use_multiprocess_dir(path: str) -> None:
    """From now on this process's metrics live in files in `path`, shared with its node's other workers.

    Creates `path` 0700; refuses one that is not a directory of this user's,
    private to it (another user could plant or read the files). Call before
    any `ProxyMetrics` is made: prometheus_client picks a metric's storage
    when it is created. Marks the dead workers' gauges dead (see module doc).
    """
    shared_ports.private_dir(path)
    with open(os.path.join(path, ".lock"), "w") as lock:
        # One worker at a time decides: never wipe files a live worker writes into.
        fcntl.flock(lock, fcntl.LOCK_EX)
        _start_from_zero_unless_a_worker_lives(path)
    os.environ[MULTIPROCESS_ENV] = path
    values.ValueClass = values.MultiProcessValue()
    _mark_dead_workers(path)


def _start_from_zero_unless_a_worker_lives(path: str) -> None:
    files = glob.glob(os.path.join(path, "*.db"))
    if any(worker_alive(pid) for pid in filter(None, map(_file_pid, files))):
        return
    for name in files:
        os.unlink(name)


def _file_pid(name: str) -> int | None:
    """The worker's pid in a metrics file's name (`counter_1234.db`), None for another file."""
    pid = os.path.basename(name).rsplit("_", 1)[-1].removesuffix(".db")
    return int(pid) if pid.isdigit() else None


def _mark_dead_workers(path: str) -> None:
    """Drop the live-gauge files of processes that are gone, so a dead worker's in-flight count leaves the sum."""
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        pid = _file_pid(name)
        if pid is not None and not worker_alive(pid):
            mark_process_dead(pid, path)


def worker_alive(pid: int) -> bool:
    """Whether the process `pid` (a worker that wrote into the node's directory) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # some other user's process
        return True
    return True


class _NodeCollector(Collector):
    """The sum of every worker's files in the directory, less the series of endpoints and backends gone."""

    def __init__(self, path: str, serving: Callable[[], tuple[set[str], set[str]] | None]) -> None:
        self._path = path
        self._serving = serving
        self._files = CollectorRegistry()
        MultiProcessCollector(self._files, path)

    def collect(self) -> Iterable[Any]:
        _mark_dead_workers(self._path)
        serving = self._serving()
        if serving is None:
            yield from self._files.collect()
            return
        endpoints, backends = serving[0] | {""}, serving[1] | {""}
        for family in self._files.collect():
            family.samples = [
                s for s in family.samples
                if s.labels.get("endpoint", "") in endpoints and s.labels.get("backend", "") in backends
            ]
            yield family


class ProxyMetrics:
    """One proxy worker's metrics: in its own registry, or in its node's shared files (`use_multiprocess_dir`)."""

    def __init__(self, model_cache_dir: str | None = None) -> None:
        """`model_cache_dir`: the node's model cache, whose stats a scrape reads (`proxy.observability.model_metrics`)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self._model_cache_dir = model_cache_dir
        self._shared = os.environ.get(MULTIPROCESS_ENV) if getattr(values.ValueClass, "_multiprocess", False) else None
        self._serving: tuple[set[str], set[str]] | None = None
        r = self.registry
        register_model_metrics(r, model_cache_dir)
        register_token_metrics(r, model_cache_dir, self._served_backends)
        self._requests = Counter(
            "gitops_http_requests",
            "Requests answered by the proxy, by endpoint, backend and status code; "
            "a WebSocket session is one request, counted when it ends (101: the app accepted it); so is a gRPC "
            "call, its code the HTTP status its gRPC status stands for (200: OK, 429: RESOURCE_EXHAUSTED, ...).",
            REQUEST_LABELS,
            registry=r,
        )
        self._duration = Histogram(
            "gitops_http_request_duration_seconds",
            "Time from receiving a request to sending its reply (WebSocket sessions not included).",
            DURATION_LABELS,
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self._shadows = Counter(
            "gitops_shadow_requests",
            "Shadow copies of requests, by result.",
            SHADOW_LABELS,
            registry=r,
        )
        self._comparisons = Counter(
            "gitops_shadow_comparisons",
            "Shadow replies compared with the primary's, by result (match, mismatch).",
            COMPARISON_LABELS,
            registry=r,
        )
        self._ongoing = Gauge(
            "gitops_backend_ongoing_requests",
            "Requests the node's proxies have in flight to a backend.",
            ONGOING_LABELS,
            registry=r,
            multiprocess_mode="livesum",
        )
        self._batch_size = Histogram(
            "gitops_batch_size",
            "Requests a batched backend's handler received in one call.",
            BATCH_LABELS,
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self._first_byte = Histogram(
            "gitops_http_time_to_first_byte_seconds",
            "Time from receiving a request to sending the first chunk of its streamed reply, "
            "or a WebSocket's accept.",
            DURATION_LABELS,
            buckets=REQUEST_BUCKETS,
            registry=r,
        )
        self._inter_chunk = Histogram(
            "gitops_stream_inter_chunk_seconds",
            "Time between two chunks of a streamed answer (for a token stream: the time per output token).",
            DURATION_LABELS,
            buckets=INTER_CHUNK_BUCKETS,
            registry=r,
        )
        self._chunks = Histogram(
            "gitops_stream_chunks",
            "Chunks one streamed answer sent, its head's included (for a token stream: about its output tokens).",
            DURATION_LABELS,
            buckets=CHUNK_BUCKETS,
            registry=r,
        )
        self._streams: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._rate_limited = Counter(
            "gitops_http_rate_limited",
            "Requests refused with 429 because their tenant was over the endpoint's [limits] "
            "(the tenant's key is never a label).",
            LIMITED_LABELS,
            registry=r,
        )
        self._limited: dict[str, Any] = {}
        self._tokens_admitted = Counter(
            "gitops_tenant_tokens_admitted",
            "LLM tokens requests were admitted on under an endpoint's tokens_per_minute (the estimate: body "
            "bytes / 4 plus max_tokens), by tenant (8 hex digits of its hashed key; past 64 per worker, 'other').",
            TENANT_LABELS_NAMES,
            registry=r,
        )
        self._tokens_charged = Counter(
            "gitops_tenant_tokens_charged",
            "LLM tokens the answers' usage reported (prompt + completion) and their tenants' budgets were "
            "charged, by tenant (as gitops_tenant_tokens_admitted_total).",
            TENANT_LABELS_NAMES,
            registry=r,
        )
        self._token_limited = Counter(
            "gitops_tenant_token_limited",
            "Requests refused with 429 because their tenant was over the endpoint's tokens_per_minute, by "
            "tenant (as gitops_tenant_tokens_admitted_total).",
            TENANT_LABELS_NAMES,
            registry=r,
        )
        # endpoint -> tenant label -> its (admitted, charged, limited) children
        self._tenants: dict[str, dict[str, tuple[Any, Any, Any]]] = {}
        self._stalls = Counter(
            "gitops_replica_stalls",
            "Replicas a proxy found stalled (two calls ran out the endpoint's timeout and the replica "
            "answered nothing since the first was sent) and took out of routing; the controller replaces them.",
            ONGOING_LABELS,
            registry=r,
        )
        self._retries = Counter(
            "gitops_proxy_retries",
            "Failed tries the proxy sent again to another replica ([endpoints.X.retries]), by backend and the "
            "outcome retried (replica-died, replica-stalled, or the status code answered).",
            ["backend", "outcome"],
            registry=r,
        )
        self._budget_spent = Counter(
            "gitops_proxy_retry_budget_exhausted",
            "Retries due but not sent because the backend's retry budget (budget_percent of its requests over "
            "10 s, per proxy worker) was spent.",
            ONGOING_LABELS,
            registry=r,
        )
        self._ejections = Counter(
            "gitops_proxy_outlier_ejections",
            "Replicas the proxy ejected from routing as outliers ([endpoints.X.outliers]: errors in a row, or a "
            "success rate below its backend's), each ejection once.",
            ONGOING_LABELS,
            registry=r,
        )
        self._ejected = Gauge(
            "gitops_proxy_ejected_replicas",
            "Replicas of a backend ejected as outliers now, summed over the node's proxy workers (each worker "
            "ejects on its own).",
            ONGOING_LABELS,
            registry=r,
            multiprocess_mode="livesum",
        )
        self._ejected_backends: set[str] = set()
        self._circuit_open = Counter(
            "gitops_proxy_circuit_open",
            "Requests answered 503 because a circuit limit of their endpoint ([endpoints.X.circuit]) was reached, "
            "by backend and limit (pending: requests waiting for a replica; retries: retries in flight).",
            ["backend", "limit"],
            registry=r,
        )
        self._deadline_exceeded = Counter(
            "gitops_proxy_deadline_exceeded",
            "Requests answered 504 because their deadline passed (the client's X-Request-Timeout capped by the "
            "endpoint's timeout_s, or that timeout), by endpoint and when (not-started: before any replica call; "
            "expired: while it waited for a replica or one ran it, whose answer, if it comes, is dropped).",
            ["endpoint", "when"],
            registry=r,
        )
        self._model_requests = Counter(
            "gitops_model_requests",
            "Requests a multiplexed backend answered for a model its replica held, by backend and model "
            "(the ids its `models` lists; any other: 'other').",
            MODEL_LABELS,
            registry=r,
        )
        self._model_loads = Counter(
            "gitops_model_loads",
            "Models a multiplexed backend's replicas loaded to answer a request (`@multiplexed`), by model "
            "(listed ids; any other: 'other').",
            MODEL_LABELS,
            registry=r,
        )
        self._model_evictions = Counter(
            "gitops_model_evictions",
            "Models a multiplexed backend's replicas evicted (least recently used) to load another, by model "
            "(listed ids; any other: 'other').",
            MODEL_LABELS,
            registry=r,
        )
        self._captured = Counter(
            "gitops_capture_records",
            "Capture records of sampled requests, by result: written to the sink, or dropped (the worker's "
            "queue was full, or the sink could not be written).",
            ["result"],
            registry=r,
        )
        self._spans = Counter(
            "gitops_proxy_trace_spans",
            "Request spans the proxy sent to the OTLP endpoint (--otlp-endpoint), by result: exported, or "
            "failed (refused or unreachable; those spans are lost).",
            ["result"],
            registry=r,
        )
        self._finished: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._sessions: dict[tuple[str, str, int], Any] = {}
        self._first_bytes: dict[tuple[str, str], Any] = {}
        self._ongoing_backends: set[str] = set()
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._claim = -1

    def request_finished(self, endpoint: str, backend: str, code: int, duration_s: float) -> None:
        key = (endpoint, backend, code)
        children = self._finished.get(key)
        if children is None:
            children = (
                self._requests.labels(endpoint, backend, str(code)),
                self._duration.labels(endpoint, backend),
            )
            self._finished[key] = children
        counter, histogram = children
        counter.inc()
        histogram.observe(duration_s)

    def session_finished(self, endpoint: str, backend: str, code: int) -> None:
        """A WebSocket session ended: one request, no duration (a lifetime is no latency)."""
        key = (endpoint, backend, code)
        counter = self._sessions.get(key)
        if counter is None:
            counter = self._sessions[key] = self._requests.labels(endpoint, backend, str(code))
        counter.inc()

    def shadow_finished(self, endpoint: str, backend: str, result: str) -> None:
        self._shadows.labels(endpoint, backend, result).inc()

    def shadow_compared(self, endpoint: str, backend: str, matched: bool) -> None:
        self._comparisons.labels(endpoint, backend, "match" if matched else "mismatch").inc()

    # `proxy.app.Recorder` names the same two events this way; with these a
    # ProxyMetrics is passed to ProxyApp as its recorder, no adapter needed.
    request_done = request_finished
    shadow_done = shadow_finished
    session_done = session_finished

    def first_byte(self, endpoint: str, backend: str, seconds: float) -> None:
        """A streamed answer's first chunk, or a WebSocket's accept, went out `seconds` after the request came."""
        key = (endpoint, backend)
        histogram = self._first_bytes.get(key)
        if histogram is None:
            histogram = self._first_bytes[key] = self._first_byte.labels(endpoint, backend)
        histogram.observe(seconds)

    def gap_observer(self, endpoint: str, backend: str) -> Callable[[float], None]:
        """Observes a streamed answer's gap before each chunk after its head, as it comes."""
        return self._stream_children(endpoint, backend)[0].observe

    def stream_done(self, endpoint: str, backend: str, chunks: int) -> None:
        """A streamed answer ended after `chunks` chunks, its head's included."""
        self._stream_children(endpoint, backend)[1].observe(chunks)

    def _stream_children(self, endpoint: str, backend: str) -> tuple[Any, Any]:
        """The inter-chunk and chunks histograms of (`endpoint`, `backend`)."""
        key = (endpoint, backend)
        children = self._streams.get(key)
        if children is None:
            children = self._streams[key] = (
                self._inter_chunk.labels(endpoint, backend), self._chunks.labels(endpoint, backend)
            )
        return children

    def rate_limited(self, endpoint: str) -> None:
        """A request was refused (429): its tenant was over the endpoint's limit."""
        counter = self._limited.get(endpoint)
        if counter is None:
            counter = self._limited[endpoint] = self._rate_limited.labels(endpoint)
        counter.inc()

    def tokens_admitted(self, endpoint: str, tenant: str, tokens: int) -> None:
        self._tenant(endpoint, tenant)[0].inc(tokens)

    def tokens_charged(self, endpoint: str, tenant: str, tokens: int) -> None:
        self._tenant(endpoint, tenant)[1].inc(tokens)

    def token_limited(self, endpoint: str, tenant: str) -> None:
        self._tenant(endpoint, tenant)[2].inc()

    def _tenant(self, endpoint: str, tenant: str) -> tuple[Any, Any, Any]:
        """A tenant's counters: its own among an endpoint's first TENANT_LABELS tenants, else 'other''s."""
        tenants = self._tenants.get(endpoint)
        if tenants is None:
            tenants = self._tenants[endpoint] = {}
        children = tenants.get(tenant)
        if children is None:
            if len(tenants) >= TENANT_LABELS:
                tenant = OTHER_TENANT
                children = tenants.get(tenant)
            if children is None:
                children = tenants[tenant] = (
                    self._tokens_admitted.labels(endpoint, tenant),
                    self._tokens_charged.labels(endpoint, tenant),
                    self._token_limited.labels(endpoint, tenant),
                )
        return children

    def replica_stalled(self, backend: str) -> None:
        self._stalls.labels(backend).inc()

    def retried(self, backend: str, outcome: str) -> None:
        self._retries.labels(backend, outcome).inc()

    def retry_budget_spent(self, backend: str) -> None:
        self._budget_spent.labels(backend).inc()

    def replica_ejected(self, backend: str) -> None:
        self._ejections.labels(backend).inc()

    def circuit_open(self, backend: str, limit: str) -> None:
        self._circuit_open.labels(backend, limit).inc()

    def deadline_exceeded(self, endpoint: str, when: str) -> None:
        self._deadline_exceeded.labels(endpoint, when).inc()

    def model_served(self, backend: str, model: str, loaded: bool, evicted: Collection[str]) -> None:
        self._model_requests.labels(backend, model).inc()
        if loaded:
            self._model_loads.labels(backend, model).inc()
        for gone in evicted:
            self._model_evictions.labels(backend, gone).inc()

    def capture_record(self, result: str) -> None:
        """A capture record written or dropped (`proxy.observability.capture`, on its writer thread or the request path)."""
        self._captured.labels(result).inc()

    def spans_sent(self, result: str, count: int) -> None:
        """Request spans exported or failed (`proxy.observability.tracing`, on the exporter's thread)."""
        self._spans.labels(result).inc(count)

    def batch_sent(self, backend: str, size: int) -> None:
        self._batch_size.labels(backend).observe(size)

    def set_ongoing(self, backend: str, n: int) -> None:
        self._ongoing.labels(backend).set(n)

    def observe_load(self, loads: Mapping[str, Mapping[str, float]]) -> None:
        """Set every backend's ongoing requests from `ProxyApp.backend_load()`.

        Ongoing = in flight on replicas + waiting in this proxy's queue: every
        request the proxy holds for that backend. Backends gone from the
        proxy's snapshot lose their series.
        """
        for backend in self._ongoing_backends - set(loads):
            self.set_ongoing(backend, 0)  # shared files keep a removed series: zero it first
            _remove_where(self._ongoing, ONGOING_LABELS, "backend", backend)
        for backend, load in loads.items():
            self.set_ongoing(backend, int(load.get("ongoing", 0) + load.get("queued", 0)))  # counts; "reported" is the float
        self._ongoing_backends = set(loads)
        # Ejected replicas: a backend that had some keeps its series (at 0) while it is served.
        self._ejected_backends = (self._ejected_backends & set(loads)) | {b for b, load in loads.items() if "ejected" in load}
        for backend in self._ejected_backends:
            self._ejected.labels(backend).set(int(loads[backend].get("ejected", 0)))

    async def sample_load_forever(
        self, loads: Callable[[], Mapping[str, Mapping[str, float]]], interval_s: float = 1.0
    ) -> None:
        """Run on the proxy's event loop: the load is read where it is written."""
        while True:
            self.observe_load(loads())
            await asyncio.sleep(interval_s)

    def forget_endpoint(self, endpoint: str) -> None:
        """Drop a deleted endpoint's series so churn cannot grow cardinality."""
        self._finished = {k: v for k, v in self._finished.items() if k[0] != endpoint}
        self._sessions = {k: v for k, v in self._sessions.items() if k[0] != endpoint}
        self._first_bytes = {k: v for k, v in self._first_bytes.items() if k[0] != endpoint}
        self._streams = {k: v for k, v in self._streams.items() if k[0] != endpoint}
        for metric, names in self._by_route():
            _remove_where(metric, names, "endpoint", endpoint)
        if self._limited.pop(endpoint, None) is not None:
            _remove_where(self._rate_limited, LIMITED_LABELS, "endpoint", endpoint)
        _remove_where(self._deadline_exceeded, ("endpoint", "when"), "endpoint", endpoint)
        if self._tenants.pop(endpoint, None) is not None:
            for counter in (self._tokens_admitted, self._tokens_charged, self._token_limited):
                _remove_where(counter, TENANT_LABELS_NAMES, "endpoint", endpoint)

    def forget_backend(self, backend: str) -> None:
        """Drop a deleted backend's series."""
        self._finished = {k: v for k, v in self._finished.items() if k[1] != backend}
        self._sessions = {k: v for k, v in self._sessions.items() if k[1] != backend}
        self._first_bytes = {k: v for k, v in self._first_bytes.items() if k[1] != backend}
        self._streams = {k: v for k, v in self._streams.items() if k[1] != backend}
        for metric, names in self._by_route():
            _remove_where(metric, names, "backend", backend)
        _remove_where(self._ongoing, ONGOING_LABELS, "backend", backend)
        _remove_where(self._batch_size, BATCH_LABELS, "backend", backend)
        _remove_where(self._retries, ("backend", "outcome"), "backend", backend)
        _remove_where(self._budget_spent, ONGOING_LABELS, "backend", backend)
        _remove_where(self._ejections, ONGOING_LABELS, "backend", backend)
        _remove_where(self._circuit_open, ("backend", "limit"), "backend", backend)
        if backend in self._ejected_backends:
            self._ejected.labels(backend).set(0)  # shared files keep a removed series: zero it first
            self._ejected_backends.discard(backend)
        _remove_where(self._ejected, ONGOING_LABELS, "backend", backend)
        for counter in (self._model_requests, self._model_loads, self._model_evictions):
            _remove_where(counter, MODEL_LABELS, "backend", backend)

    def retain(self, endpoints: Collection[str], backends: Collection[str]) -> None:
        """Forget every series of an endpoint or backend the proxy no longer
        serves, so config churn cannot grow cardinality; called per snapshot."""
        self._serving = (set(endpoints), set(backends))
        for endpoint in (self._labelled("endpoint") | set(self._limited) | set(self._tenants)) - set(endpoints):
            self.forget_endpoint(endpoint)
        for backend in self._labelled("backend") - set(backends):
            self.forget_backend(backend)

    def _labelled(self, name: str) -> set[str]:
        return {
            sample.labels[name]
            for metric, _ in self._by_route()
            for family in metric.collect()
            for sample in family.samples
        }

    def _by_route(self) -> list[tuple[Counter | Histogram, tuple[str, ...]]]:
        return [
            (self._requests, REQUEST_LABELS),
            (self._duration, DURATION_LABELS),
            (self._shadows, SHADOW_LABELS),
            (self._comparisons, COMPARISON_LABELS),
            (self._first_byte, DURATION_LABELS),
            (self._inter_chunk, DURATION_LABELS),
            (self._chunks, DURATION_LABELS),
        ]

    def render(self) -> bytes:
        """What a scrape answers: the node's sum in shared mode, else this process's metrics."""
        return generate_latest(self._served())

    def _served(self) -> CollectorRegistry:
        if self._shared is None:
            return self.registry
        served = CollectorRegistry(auto_describe=False)
        served.register(_NodeCollector(self._shared, lambda: self._serving))
        register_model_metrics(served, self._model_cache_dir)
        register_token_metrics(served, self._model_cache_dir, self._served_backends)
        return served

    def _served_backends(self) -> set[str] | None:
        return self._serving[1] if self._serving is not None else None

    def serve(self, host: str = "127.0.0.1", port: int = DEFAULT_METRICS_PORT, limits: EdgeLimits = EdgeLimits()) -> int:
        """Serve `/metrics` on a background thread; returns the bound port.

        Served by the bounded server of every other listener (`httpedge.server`, on
        its own event loop on that thread): idle connections closed after
        `limits.keep_alive_s`, headers due within `limits.header_timeout_s`, at most
        `limits.max_connections` at once, no thread per connection. In shared mode
        the port is shared (SO_REUSEPORT, `proxy.shell.shared_ports`) with the node's
        other proxy workers: whichever answers, it answers the node's sum. Port 0
        picks a free port (tests). Call `close()` when the proxy stops.
        """
        try:
            if self._shared is not None:
                self._claim = shared_ports.claim(host, port, self._shared)
            listening = _listening(host, port, shared=self._shared is not None)
        except OSError as error:
            shared_ports.release(self._claim)
            self._claim = -1
            raise OSError(f"proxy metrics cannot listen on {host}:{port}: {error.strerror or error}") from None
        server = self._server = Server(self._asgi, limits)
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=loop.run_until_complete, args=(server.serve([listening]),), name="proxy-metrics", daemon=True
        )
        self._thread.start()
        return int(listening.getsockname()[1])

    async def _asgi(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        """Any path: the metrics (as prometheus_client's WSGI app served them), gzipped when asked."""
        if scope["type"] != "http":
            return
        headers = {name.lower(): value.decode("latin-1") for name, value in scope["headers"]}
        encoder, content_type = choose_encoder(headers.get(b"accept", ""))
        body = encoder(self._served())
        head = [(b"content-type", content_type.encode())]
        if "gzip" in headers.get(b"accept-encoding", ""):
            body, head = gzip.compress(body), [*head, (b"content-encoding", b"gzip")]
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    def close(self) -> None:
        server, loop, thread = self._server, self._loop, self._thread
        if server is not None and loop is not None and thread is not None:
            try:
                asyncio.run_coroutine_threadsafe(server.shutdown(1.0), loop).result(5.0)
            except RuntimeError:  # the loop has already stopped
                pass
            thread.join(5.0)
            loop.close()
        self._server = self._loop = self._thread = None
        shared_ports.release(self._claim)
        self._claim = -1


def _listening(host: str, port: int, shared: bool) -> socket.socket:
    """A bound socket for the metrics port; shared: its port shared by the node's proxy workers."""
    listening = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if shared:
            listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listening.bind((host, port))
        listening.listen(128)
    except OSError:
        listening.close()
        raise
    return listening


def _remove_where(
    metric: Counter | Gauge | Histogram, names: tuple[str, ...], name: str, value: str
) -> None:
    """Remove every series of `metric` whose label `name` equals `value`."""
    found = {
        tuple(sample.labels[label] for label in names)
        for family in metric.collect()
        for sample in family.samples
    }
    at = names.index(name)
    with warnings.catch_warnings():
        # Shared files cannot drop a series (a served scrape leaves it out instead); the local child goes.
        warnings.simplefilter("ignore", UserWarning)
        for labels in found:
            if labels[at] == value:
                metric.remove(*labels)
