"""The Open Inference Protocol (KServe's and Triton's "v2") for a backend with `protocol = "v2"`.

- `tensors`: one tensor to and from a numpy array, as JSON data or binary
  tensor data, bounded by what the client sent.
- `protocol`: the REST messages: model metadata, an inference request read,
  its answer written.
- `app`: `V2App`, the ASGI app a v2 backend's replicas serve around the
  user's model class (`predict(inputs) -> outputs`); the replica host
  (`replica.host`) builds it.

Nothing imports these modules (nor numpy) unless a backend speaks v2. The
gRPC twin of this surface is not here yet (issue 45, item 1).
"""
