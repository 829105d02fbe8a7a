"""ray-gitops data plane: the HTTP proxy actors, several worker processes per Ray node.

Map (layers import only downward):
- pure: `routing` (longest-prefix match, 405), `steering` (header and JSON
  match, sticky key), `multiplexing` (a multiplexed backend's model to a replica holding it,
  and its hottest model's load for the autoscaler),
  `rate_limits` (per-tenant token buckets), `settings` (tunables, with `httpedge.limits`),
  `shadow_compare` (shadow replies against the primary's),
  `stalls` (per-replica progress and the rule that finds a hung replica),
  `request_stats` (answers counted for rollout checks); the choices
  (weighted backend, shadow sampling, power-of-two replica, queue admission)
  are `vocabulary.choosing`, and a backend's routing policy and the key it
  reads `vocabulary.policies` and `vocabulary.request_keys`, all shared with
  the replicas' handles, and the
  proxy <-> replica tuples `vocabulary.wire`;
- state without I/O: `replicas` (per-backend pools, wait queue),
  `snapshot` (the immutable route table a request reads once),
  `subscriptions` (long-poll payloads -> snapshot), `running_calls` (the
  calls on one event loop, their deadlines and clients), `coalescing`
  (requests queued for one replica share one Ray call under load),
  `gathering` (a batched backend's requests gathered into lists);
- the seam to replicas: `calling` (the caller seam and its errors),
  `socketcalls` (one data connection per replica, calls as frames over it:
  a private Unix socket on the proxy's own node, TCP with a per-replica
  secret across nodes), `replica_calls` (the one call stack: frames when
  connected, else coalesced Ray calls, both injected);
- request path: `app` (ASGI), `streaming` (streamed answers), `websockets`
  (a WebSocket carried to one replica for its lifetime), `tracing` (head
  sampling and the request span, exported over OTLP), `capture` (sampled
  request/response records, a bounded queue and the writer thread) with
  `redacting` (what a record says, redacted: pure) and `capture_s3` (an
  `s3://` sink's batched objects, with obstore), `metrics` (its
  Prometheus recorder and the port they are scraped from), `model_metrics`
  (the node's model cache metrics, read from its stats file), `shared_ports`
  (ports one node's workers share), `node_mismatches` (a node's shadow
  mismatches), `shared_buckets` (the tenants' token buckets a node's
  workers share, in a memory-mapped file);
- Ray shell: `raycalls`, `controller_link`, `longpoll_client`,
  `load_reporting`, `actor` (`httpedge.server` inside the Ray actor).
"""
