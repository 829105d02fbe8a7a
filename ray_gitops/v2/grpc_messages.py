"""The Open Inference Protocol's (v2) gRPC messages: each method's request read, its answer written.

The messages are KServe's `grpc_predict_v2.proto` (`ray_gitops.v2.proto`):
this module turns a serialized request into what the REST side reads too
(`ray_gitops.v2.protocol.InferRequest`, checked against the model's metadata
by the same checks, `declared_input`, `fitted_input`, `complete_inputs`,
`declared_output`, `known_model`), and the model's answer
(`answer_arrays`) into a serialized response. Tensors are read from
`raw_input_contents` (the binary tensor extension's encoding, one entry per
input, at its index) or, when that is empty, from each input's typed
`contents` (`ray_gitops.v2.tensors`). Outputs are written raw, in
`raw_output_contents`, as Triton answers, unless the request's parameter
`binary_data_output` is false: then each in its typed `contents` (all or
none, as the protocol says; FP16 has no typed field). A request the protocol
or the metadata refuses raises `RequestError` (INVALID_ARGUMENT at the
client), one for another model `UnknownModel` (NOT_FOUND). Pure: bytes in,
bytes out; `ray_gitops.v2.grpc_service` answers the calls.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from google.protobuf.message import DecodeError, Message

from ray_gitops.v2.proto import grpc_predict_v2_pb2 as pb
from ray_gitops.v2.protocol import (
    InferRequest,
    ModelMetadata,
    RequestError,
    answer_arrays,
    complete_inputs,
    declared_input,
    declared_output,
    fitted_input,
    known_model,
)
from ray_gitops.v2.tensors import TensorError, from_binary, from_typed, to_binary, to_typed, typed_field

__all__ = [
    "live_response",
    "server_ready_response",
    "model_ready_response",
    "server_metadata_response",
    "model_metadata_response",
    "read_model_request",
    "read_infer_request",
    "write_infer_response",
]

_RAW_OUTPUTS = "binary_data_output"


def live_response(live: bool) -> bytes:
    return pb.ServerLiveResponse(live=live).SerializeToString()


def server_ready_response(ready: bool) -> bytes:
    return pb.ServerReadyResponse(ready=ready).SerializeToString()


def model_ready_response(ready: bool) -> bytes:
    return pb.ModelReadyResponse(ready=ready).SerializeToString()


def server_metadata_response(name: str, version: str, extensions: tuple[str, ...]) -> bytes:
    return pb.ServerMetadataResponse(name=name, version=version, extensions=extensions).SerializeToString()


def model_metadata_response(model: ModelMetadata) -> bytes:
    """The model's metadata, as `ModelMetadata.as_json` says it over REST."""
    tensor = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=model.name,
        versions=[model.version],
        platform=model.platform,
        inputs=[tensor(name=t.name, datatype=t.datatype.value, shape=t.shape) for t in model.inputs],
        outputs=[tensor(name=t.name, datatype=t.datatype.value, shape=t.shape) for t in model.outputs],
    ).SerializeToString()


def read_model_request(message: bytes, model: ModelMetadata) -> None:
    """A `ModelReadyRequest` or `ModelMetadataRequest` (the same fields), refused unless it names
    `model` (and its version, when it names one)."""
    request = _parsed(pb.ModelReadyRequest, message)
    known_model(request.name, request.version, model)


def read_infer_request(message: bytes, model: ModelMetadata) -> InferRequest:
    """A `ModelInferRequest`, checked against `model`'s inputs and outputs."""
    request = _parsed(pb.ModelInferRequest, message)
    known_model(request.model_name, request.model_version, model)
    parameters = _parameters(request.parameters, "the request")
    raw_outputs = parameters.get(_RAW_OUTPUTS, True)
    if not isinstance(raw_outputs, bool):
        raise RequestError(f"parameter '{_RAW_OUTPUTS}' must be a bool_param")
    if not request.inputs:
        raise RequestError("'inputs' must hold the model's input tensors")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise RequestError(
            f"raw_input_contents has {len(raw)} entries and inputs {len(request.inputs)}: "
            "each input's data is the entry at its index"
        )
    arrays: dict[str, np.ndarray] = {}
    for index, tensor in enumerate(request.inputs):
        what, spec = declared_input(tensor.name, tensor.datatype, model, arrays)
        shape = list(tensor.shape)
        try:
            if raw:
                if tensor.HasField("contents"):
                    raise RequestError(f"{what} has contents while raw_input_contents holds the inputs' data")
                array = from_binary(what, tensor.datatype, shape, memoryview(raw[index]))
            else:
                field = typed_field(what, tensor.datatype)
                array = from_typed(what, tensor.datatype, shape, getattr(tensor.contents, field))
        except TensorError as error:
            raise RequestError(str(error)) from None
        arrays[tensor.name] = fitted_input(what, array, spec)
    asked: dict[str, bool] = {}
    for tensor in request.outputs:
        declared_output(tensor.name, model, asked)
        asked[tensor.name] = raw_outputs
    return InferRequest(
        request.id or None, parameters, complete_inputs(arrays, model), asked, binary_default=raw_outputs
    )


def write_infer_response(request: InferRequest, results: Any, model: ModelMetadata) -> bytes:
    """The `ModelInferResponse` to `request` from what predict() returned; raises `AnswerError`
    when that does not match the model's outputs, `RequestError` when an output asked for typed
    has no typed contents (FP16)."""
    response = pb.ModelInferResponse(model_name=model.name, model_version=model.version, id=request.id or "")
    for name, datatype, array in answer_arrays(request, results, model):
        output = response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        if request.binary_default:
            response.raw_output_contents.append(to_binary(array, datatype))
            continue
        what = f"output '{name}'"
        try:
            getattr(output.contents, typed_field(what, datatype)).extend(to_typed(what, array, datatype))
        except TensorError as error:
            raise RequestError(str(error)) from None
    return response.SerializeToString()


def _parsed(kind: type[Any], message: bytes) -> Any:
    try:
        return kind.FromString(message)
    except DecodeError:
        raise RequestError(f"the request is not a {kind.DESCRIPTOR.full_name} message") from None


def _parameters(parameters: Mapping[str, Message], what: str) -> dict[str, Any]:
    """A message's `parameters` map as plain values (bool, int or str)."""
    plain: dict[str, Any] = {}
    for key, parameter in parameters.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is None:
            raise RequestError(f"{what}: parameter '{key[:80]}' has no value")
        plain[key] = getattr(parameter, choice)
    return plain
