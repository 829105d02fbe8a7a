"""The Open Inference Protocol's (v2) gRPC service around one model: `inference.GRPCInferenceService`.

An endpoint with `grpc_service = "inference.GRPCInferenceService"` whose
backend has `protocol = "v2"` takes the v2 gRPC calls on the proxy's gRPC
port (`gitops run --grpc-port`). Each reaches a replica as a gRPC call
(`replica.calling.grpc_calls`), which the replica host gives to this service rather
than to the model: its methods are the protocol's, named as its RPCs, each
given the serialized request and answering the serialized response
(`ray_gitops.v2.grpc_messages`):

    ServerLive, ServerReady          live: always; ready: the model's readiness
    ModelReady                       the model's readiness (NOT_FOUND for another model)
    ServerMetadata, ModelMetadata    as REST's GET /v2 and /v2/models/NAME say them
    ModelInfer                       inference: raw or typed inputs, raw outputs unless asked typed

A refusal ends the call with a gRPC status code (`GrpcAbort`):
INVALID_ARGUMENT for a request the protocol or the metadata refuses,
NOT_FOUND for a model or version the endpoint does not serve, UNAVAILABLE
for an inference while the model is not ready, INTERNAL when predict()
raised or returned what the metadata does not say (the REST side's 400,
404, 400 and 500). The other methods of the protocol's service (the
repository, statistics, shared-memory and trace extensions of Triton's
service) are no methods here: UNIMPLEMENTED.
"""

from __future__ import annotations

import logging
from typing import NoReturn

from ray_gitops.v2 import grpc_messages as messages
from ray_gitops.v2.protocol import AnswerError, RequestError, UnknownModel
from ray_gitops.v2.served import EXTENSIONS, SERVER_NAME, PredictFailed, ServedModel, server_version
from vocabulary.request_path.grpc_calls import INTERNAL, INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, GrpcAbort
from vocabulary.request_path.v2_calls import V2_SERVICE

__all__ = ["V2GrpcService", "SERVICE"]

logger = logging.getLogger(__name__)

# The service an endpoint names to take v2 gRPC calls (the proto's package and service; the proxy
# routes its model methods' calls by the model they name, `vocabulary.request_path.v2_calls`).
SERVICE = V2_SERVICE


class V2GrpcService:
    """The v2 gRPC methods of one served model: bytes in, bytes out, refusals as `GrpcAbort`.

    Its public methods are the RPCs the replica host calls by name, hence their CamelCase."""

    def __init__(self, served: ServedModel) -> None:
        self._served = served
        self._metadata = messages.model_metadata_response(served.metadata)
        self._server = messages.server_metadata_response(SERVER_NAME, server_version(), EXTENSIONS)

    async def ServerLive(self, message: bytes) -> bytes:
        return messages.live_response(True)

    async def ServerReady(self, message: bytes) -> bytes:
        return messages.server_ready_response(self._served.is_ready())

    async def ModelReady(self, message: bytes) -> bytes:
        self._named(message)
        return messages.model_ready_response(self._served.is_ready())

    async def ServerMetadata(self, message: bytes) -> bytes:
        return self._server

    async def ModelMetadata(self, message: bytes) -> bytes:
        self._named(message)
        return self._metadata

    async def ModelInfer(self, message: bytes) -> bytes:
        served = self._served
        model = served.metadata
        try:
            request = messages.read_infer_request(message, model)
        except RequestError as error:
            _refuse(error)
        if not served.is_ready():
            raise GrpcAbort(UNAVAILABLE, f"model '{model.name}' is not ready")
        try:
            results = await served.predict(request.inputs, request.parameters)
        except PredictFailed as error:
            raise GrpcAbort(INTERNAL, str(error)) from None
        try:
            return messages.write_infer_response(request, results, model)
        except AnswerError as error:
            logger.error("model %s: %s", model.name, error)
            raise GrpcAbort(INTERNAL, str(error)) from None
        except RequestError as error:
            _refuse(error)

    def _named(self, message: bytes) -> None:
        try:
            messages.read_model_request(message, self._served.metadata)
        except RequestError as error:
            _refuse(error)


def _refuse(error: RequestError) -> NoReturn:
    raise GrpcAbort(NOT_FOUND if isinstance(error, UnknownModel) else INVALID_ARGUMENT, str(error)) from None
