"""ray-gitops data plane: the HTTP proxy actor, one per Ray node.

Map (layers import only downward):
- pure: `routing` (longest-prefix match, 405), `settings`; the choices
  (weighted backend, shadow sampling, power-of-two replica, queue admission)
  are `vocabulary.choosing`, shared with the replicas' handles, and the
  proxy <-> replica tuples `vocabulary.wire`;
- state without I/O: `replicas` (per-backend pools, wait queue), `config`
  (the immutable snapshot), `subscriptions` (long-poll payloads -> snapshot),
  `coalescing` (requests queued for one replica share one Ray call under
  load), `gathering` (a batched backend's requests gathered into lists);
- request path: `calling` (the caller seam and its errors), `app` (ASGI),
  `websockets` (a WebSocket carried to one replica for its lifetime),
  `metrics` (its Prometheus recorder and the port they are scraped from),
  `socketcalls` (one data connection per replica, calls as frames over it),
  `replica_calls` (the one call stack: frames when connected, else
  coalesced Ray calls, both injected);
- Ray shell: `raycalls`, `controller_link`, `longpoll_client`,
  `load_reporting`, `actor` (`httpedge.server` inside the Ray actor).
"""
