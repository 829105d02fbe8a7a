"""The Open Inference Protocol (KServe's and Triton's "v2") for a backend with `protocol = "v2"`.

- `tensors`: one tensor to and from a numpy array, as JSON data, binary
  tensor data (REST's extension, gRPC's raw contents) or gRPC's typed
  contents, bounded by what the client sent.
- `protocol`: the model's metadata, the checks every transport's request and
  answer pass, and the REST messages: an inference request read, its answer
  written.
- `proto`: KServe's `grpc_predict_v2.proto`, vendored, and the messages
  generated from it; `grpc_messages`: each gRPC method's request read and
  answer written with them.
- `served`: the user's model class (`predict(inputs) -> outputs`) loaded, its
  readiness and its predict() run, for both surfaces.
- `app`: `V2App`, the ASGI app a v2 backend's replicas serve around the model
  (the replica host, `replica.host`, builds it), holding `grpc_service`;
  `grpc_service`: `V2GrpcService`, the protocol's gRPC methods, which the
  replica host gives the calls of the proxy's gRPC port.

Nothing imports these modules (nor numpy or protobuf) unless a backend speaks v2.
"""
