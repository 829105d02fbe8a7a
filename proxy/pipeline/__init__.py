"""The request path's pieces beyond the app: the stages a request passes, in order, and
what carries a request past its one reply.

- `websockets`: a WebSocket carried to one replica for its lifetime;
- `streaming`: a streamed answer relayed chunk by chunk, its gaps bounded;
- `running_calls`: the calls on one event loop, their deadlines and clients.
"""
