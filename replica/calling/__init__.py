"""A call from the proxy, as user code meets it: the request's forms and the answer's.

- `conversions`: wire tuples to and from the Starlette requests and
  responses user code sees.
- `asgi`: running ASGI callables (an app's HTTP request or WebSocket).
- `grpc_calls`: a call from the proxy's gRPC port, run by the backend's
  method of the same name (bytes or protobuf messages in and out).
- `servicers`: a backend's generated gRPC servicer: what its add function
  registers, and the context its methods are given.
- `streams`: the streams held between the call that starts them and the
  calls that read them.

Imports nothing else of `replica`: the host (`replica.host`) drives these.
"""
