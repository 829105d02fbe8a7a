"""The request path as a chain of stages, and what carries a request past its one reply.

The stages, each one concern, each left out of an endpoint's chain when its
feature is off there (their one order is `proxy.app.ProxyApp.stages`):
- `admit`: the endpoint's `[limits]`, 429 for a tenant over its rate;
- `budget`: its `[limits] tokens_per_minute`, 429 for a tenant over its LLM tokens, settled on the usage its answer reports;
- `steer`: the backend a request goes to (weights, header and JSON rules);
- `trace`: the request's span, begun, carried to the replica, ended;
- `capture`: sampled request/response records, filled in and offered;
- `shadow`: copies to shadow backends, compared with the answer;
- `count`: every answer reported (`Recorder`) and counted.

What they share and what runs between them:
- `stage`: what a stage is (its hooks) and an endpoint's `Chain` of them;
- `transit`: a request in transit (what its stages share), proxy-made answers;
- `body`: a request's body read, bounded in size, time and the worker's budget;
- `forward`: a formed request's one call to the replica pool, under its deadline, its failures as answers;
- `running_calls`: the calls on one event loop, their deadlines and clients;
- `streaming`: a streamed answer sent from its head on, relayed chunk by chunk, its gaps bounded,
  its observers shown each chunk;
- `websockets`: a WebSocket carried to one replica for its lifetime.
"""
