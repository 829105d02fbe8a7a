"""The user code `bench.grpc` serves three ways: a unary noop servicer and a small v2 model.

- `Pinger` (`bench.Pinger/Ping`): a servicer as a Ray Serve user writes one,
  its method named as the gRPC method, a `BytesValue` in and a constant
  `BytesValue` out (protobuf's own wrapper message: no generated code of
  ours). Ours calls it as a backend's method, grpcio direct through
  `add_PingerServicer_to_server`, Serve as its deployment's method.
- `Doubler`: a `protocol = "v2"` model (`predict`: y = 2x, 16 FP32 values a
  row) described by `doubler_backend()`. Ours serves it as a v2 backend; grpcio
  direct serves its `V2GrpcService` (ray_gitops.v2, what our replicas answer
  the v2 gRPC calls with) on `inference.GRPCInferenceService`; Serve serves
  `ServeV2`, a deployment wrapping the same service in the messages Serve's
  ingress parses and serializes.
- `add_*Servicer_to_server`: what protoc's `_pb2_grpc` modules define, written
  out (grpcio-tools is no dependency): Serve's `grpc_servicer_functions` name
  them, and grpcio direct registers the servicers with them.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import grpc
import numpy as np
from google.protobuf.wrappers_pb2 import BytesValue

from ray_gitops.v2.grpc_service import SERVICE as V2_SERVICE
from ray_gitops.v2.grpc_service import V2GrpcService
from ray_gitops.v2.proto import grpc_predict_v2_pb2 as v2_messages
from ray_gitops.v2.protocol import ModelMetadata
from ray_gitops.v2.served import ServedModel
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.v2 import BackendProtocol, TensorConfig, TensorDatatype, V2Config

# protoc named the v2 messages' module by the .proto's file name, and a message pickles by its class's
# module: Serve's proxy pickles each request to its replica, so both find the module under that name too.
sys.modules.setdefault(v2_messages.ModelInferRequest.__module__, v2_messages)

PINGER_SERVICE = "bench.Pinger"
PONG = BytesValue(value=b"pong")
V2_MODEL = "doubler"
V2_WIDTH = 16  # float32 values in the tensor each ModelInfer sends


class Pinger:
    """`bench.Pinger`: Ping answers at once."""

    def __call__(self, request: Any) -> str:  # ours: the endpoint's HTTP route (every backend has one)
        return "pinger"

    async def Ping(self, request: BytesValue) -> BytesValue:  # noqa: N802 — named as the gRPC method
        return PONG


class Doubler:
    """A v2 model: y = 2x."""

    async def predict(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"y": inputs["x"] * 2}


def doubler_backend(name: str = V2_MODEL) -> BackendConfig:
    """The v2 backend of `Doubler`: one replica, one input x and one output y of `V2_WIDTH` FP32 values a row."""
    def tensor(tensor_name: str) -> TensorConfig:
        return TensorConfig(name=tensor_name, datatype=TensorDatatype.FP32, shape=(-1, V2_WIDTH))

    v2 = V2Config(name=V2_MODEL, inputs=(tensor("x"),), outputs=(tensor("y"),))
    return BackendConfig(name=name, version="v1", import_path="bench.grpc_apps:Doubler", protocol=BackendProtocol.V2,
                         v2=v2, ray_actor_options={"num_cpus": 0}, max_concurrent_queries=100)


def doubler_service() -> V2GrpcService:
    """The v2 gRPC service our replicas answer with, around a `Doubler`."""
    return V2GrpcService(ServedModel(Doubler(), ModelMetadata.of(doubler_backend())))


class ServeV2:
    """Serve's deployment of the v2 model: the same service, in the messages Serve's ingress hands it."""

    def __init__(self) -> None:
        self._service = doubler_service()

    async def ModelInfer(self, request: v2_messages.ModelInferRequest) -> v2_messages.ModelInferResponse:  # noqa: N802
        answer = await self._service.ModelInfer(request.SerializeToString())
        return v2_messages.ModelInferResponse.FromString(answer)


def _unary(function: Callable[..., Any], request_type: Any, reply_type: Any) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        function, request_deserializer=request_type.FromString, response_serializer=reply_type.SerializeToString)


def _register(server: Any, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


def add_PingerServicer_to_server(servicer: Any, server: Any) -> None:  # noqa: N802 — protoc's name for it
    _register(server, PINGER_SERVICE, {"Ping": _unary(servicer.Ping, BytesValue, BytesValue)})


def add_GRPCInferenceServiceServicer_to_server(servicer: Any, server: Any) -> None:  # noqa: N802
    """The v2 service's ModelInfer only: the one method `bench.grpc` calls."""
    _register(server, V2_SERVICE, {"ModelInfer": _unary(
        servicer.ModelInfer, v2_messages.ModelInferRequest, v2_messages.ModelInferResponse)})
