"""ray-gitops data plane: the HTTP proxy actors, several worker processes per Ray node.

Map (layers import only downward):
- pure: `routing` (longest-prefix match, 405), `steering` (header match,
  sticky key), `settings` (tunables, with `httpedge.limits`),
  `shadow_compare` (shadow replies against the primary's),
  `request_stats` (answers counted for rollout checks); the choices
  (weighted backend, shadow sampling, power-of-two replica, queue admission)
  are `vocabulary.choosing`, shared with the replicas' handles, and the
  proxy <-> replica tuples `vocabulary.wire`;
- state without I/O: `replicas` (per-backend pools, wait queue),
  `snapshot` (the immutable route table a request reads once),
  `subscriptions` (long-poll payloads -> snapshot), `running_calls` (the
  calls on one event loop, their deadlines and clients);
- the seam to replicas: `calling` (one call per request, and its errors),
  `coalescing` (requests queued for one replica share one call under load,
  over an injected transport), `socketcalls` (frames over one persistent
  connection per replica: a private Unix socket on the proxy's own node,
  TCP with a per-replica secret across nodes), `raycalls` (the calls over
  Ray, the fallback, and the transport stack);
- request path: `app` (ASGI), `streaming` (streamed answers), `sockets`
  (a WebSocket carried to one replica), `tracing` (head sampling and the
  request span, exported over OTLP), `capture` (sampled request/response
  records, a bounded queue and the writer thread) with `redacting` (what a
  record says, redacted: pure), `metrics` (its Prometheus recorder
  and the port they are scraped from), `shared_ports` (ports one node's
  workers share), `node_mismatches` (a node's shadow mismatches);
- Ray shell: `controller_link`, `longpoll_client`, `load_reporting`,
  `actor` (`httpedge.server` inside the Ray actor).
"""
