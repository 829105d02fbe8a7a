"""The request path's values, for the proxy and for handles alike.

- `wire`: the proxy <-> replica request/response tuples (the frames they
  travel in over the data path are `datalink`'s).
- `choosing`: the request path's choices (backend by weight, replica by
  power of two, queue admission).
- `policies`: the replica a backend's routing policy chooses (round robin,
  least loaded, rendezvous hashing, prefix affinity), and `request_keys`:
  the key it reads (a header, cookie, query parameter or JSON body field of
  a request; a JSON field of a handle call's argument).
- `multiplexing`: a multiplexed backend's settings, each request's model
  record, and what its answers tell the proxy.
- `deadlines`: a request's deadline as it travels (the client's
  `X-Request-Timeout`, the seconds left on the wire, re-anchored on receipt).
- `grpc_calls`: a gRPC call as a wire request (its marker, a streamed
  reply's message framing) and the gRPC codes of the proxy's refusals.
- `v2_calls`: which endpoint a v2 gRPC call is for when several serve the
  Open Inference Protocol's service (the model its message names).
"""
