"""The request path's stages: one concern each, left out of an endpoint's chain when its feature is off there.

Their one order is `proxy.app.ProxyApp.stages` (the gRPC port, `proxy.grpc_ingress`, runs them too):

- `admit`: the endpoint's `[limits]`, 429 for a tenant over its rate;
- `budget`: its `[limits] tokens_per_minute`, 429 for a tenant over its LLM tokens, settled on the usage its answer reports;
- `steer`: the backend a request goes to (weights, header and JSON rules);
- `trace`: the request's span, begun, carried to the replica, ended;
- `capture`: sampled request/response records, filled in and offered;
- `shadow`: copies to shadow backends, compared with the answer;
- `count`: every answer reported (`Recorder`) and counted.

Each is a `proxy.pipeline.stage.Stage`, whose hooks are given the
request's `proxy.pipeline.transit.Transit`; of the pipeline they import only
those two. Must not: import one another (the app orders them, they never
call each other: an independence contract in `pyproject.toml`), or the app
and the actor above them (`proxy.app`, `proxy.actor`: the rooms' layers).
"""
