"""The request path as a chain of stages, and what carries a request past its one reply.

- `stages/`: the stages, each one concern, each left out of an endpoint's
  chain when its feature is off there (their one order is
  `proxy.app.ProxyApp.stages`): admission, token budgets, steering,
  tracing, capture, shadows, counting.

What the stages share and what runs between them:
- `stage`: what a stage is (its hooks) and an endpoint's `Chain` of them;
- `transit`: a request in transit (what its stages share), proxy-made answers;
- `body`: a request's body read, bounded in size, time and the worker's budget;
- `forward`: a formed request's one call to the replica pool, under its deadline, its failures as answers;
- `running_calls`: the calls on one event loop, their deadlines and clients;
- `streaming`: a streamed answer sent from its head on, relayed chunk by chunk, its gaps bounded,
  its observers shown each chunk;
- `websockets`: a WebSocket carried to one replica for its lifetime.
"""
