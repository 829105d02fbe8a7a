"""ray-gitops data plane: the HTTP proxy actors, several worker processes per Ray node.

Map, as a floor plan (each room imports only the rooms below it; each room's
own docstring names its modules):
- `actor`: `httpedge.server` inside the Ray actor, wiring the app, the callers
  and the long poll together;
- `grpc_ingress`: the gRPC server's one generic handler: a call routed by its
  service to an endpoint, then the app's stages and replica pools;
- `app`: the ASGI app, the request path in order;
- `pipeline`: the request's stages, the call forwarded, streamed answers and WebSockets;
- `observability`: metrics, traces, capture records, shadow verdicts;
- `shell`: Ray, the controller, the node's shared ports and token buckets;
- `routes`: the route table (snapshot) a request reads once, and what each
  endpoint decides (route match, steering, tenant limits);
- `pool`: the replica pools and the calls made to their replicas;
- `settings`: tunables, with `httpedge.limits`.

The choices (weighted backend, shadow sampling, power-of-two replica, queue
admission) are `vocabulary.request_path.choosing`, and a backend's routing policy and the
key it reads `vocabulary.request_path.policies` and `vocabulary.request_path.request_keys`, all shared
with the replicas' handles; the proxy <-> replica tuples are `vocabulary.request_path.wire`.
"""
