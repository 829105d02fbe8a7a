"""KServe's Open Inference Protocol (v2) gRPC messages, from its published `grpc_predict_v2.proto`.

`grpc_predict_v2.proto` is vendored unchanged from KServe (README.md beside
it says the release, the source path and how to regenerate);
`grpc_predict_v2_pb2` (and its `.pyi`) is protoc's output for it, with one
change: its descriptors live in a pool of their own, not protobuf's default
pool, so a process that also imports Triton's or KServe's own generated
messages (the same `inference.*` names; a user's model may import
`tritonclient.grpc`) loads both. Messages only: no stubs, no servicer.
"""
