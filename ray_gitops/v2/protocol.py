"""The Open Inference Protocol's (v2) messages: a model's metadata, the checks every request and answer pass, REST's.

Owns what the messages hold, as KServe's and Triton's v2 API says them:
`ModelMetadata` (name, versions, platform, input and output tensors, from
the backend's `[v2]` table; its version is the digest of the `[models.NAME]`
entry it names, else the backend's code version); the checks a request and
an answer pass over either transport (`known_model`, `declared_input`,
`fitted_input`, `complete_inputs`, `declared_output`, `answer_arrays`: the
gRPC side, `ray_gitops.v2.grpc_messages`, uses them too); and the REST
messages: `read_request` (an inference request's JSON and, with the binary
tensor data extension, the binary tensors after it, split at
`Inference-Header-Content-Length`) and `write_answer` (outputs in JSON or
binary, as each was asked for). A request that breaks the protocol or the
metadata raises `RequestError` (the client's 400), one for another model or
version `UnknownModel` (404); an answer predict() got wrong raises
`AnswerError` (500). Pure: `ray_gitops.v2.app` does the HTTP;
`ray_gitops.v2.tensors` each tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import orjson

from ray_gitops.v2.tensors import TensorError, as_datatype, from_binary, from_json, shape_fits, to_binary, to_json
from vocabulary.spec.backends import BackendConfig
from vocabulary.spec.v2 import TensorConfig

__all__ = [
    "RequestError", "UnknownModel", "AnswerError", "ModelMetadata", "InferRequest", "read_request", "write_answer",
    "known_model", "declared_input", "fitted_input", "complete_inputs", "declared_output", "answer_arrays",
]


class RequestError(ValueError):
    """A request the protocol or the model's metadata refuses; the text is for the client."""


class UnknownModel(RequestError):
    """A model name or version this endpoint does not serve (the client's 404, gRPC's NOT_FOUND)."""


class AnswerError(Exception):
    """predict() returned outputs that do not match the model's metadata; the text is for the log and the client."""


@dataclass(frozen=True)
class ModelMetadata:
    """A v2 model as its clients see it."""

    name: str
    version: str
    platform: str
    inputs: tuple[TensorConfig, ...]
    outputs: tuple[TensorConfig, ...]

    @classmethod
    def of(cls, backend: BackendConfig) -> ModelMetadata:
        """The metadata of a `protocol = "v2"` backend, from its `[v2]` table."""
        v2 = backend.v2
        if v2 is None:
            raise ValueError(f"backend {backend.name} has no [v2] table")
        pinned = backend.model_sources.get(v2.model) if v2.model is not None else None
        if v2.model is not None and pinned is None:
            raise ValueError(f"backend {backend.name}: v2.model '{v2.model}' is not one of its models")
        version = pinned.sha256 if pinned is not None else backend.version
        return cls(v2.name or backend.name, version, v2.platform, v2.inputs, v2.outputs)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.platform,
            "inputs": [_tensor_json(tensor) for tensor in self.inputs],
            "outputs": [_tensor_json(tensor) for tensor in self.outputs],
        }


def _tensor_json(tensor: TensorConfig) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype.value, "shape": list(tensor.shape)}


@dataclass(frozen=True)
class InferRequest:
    """An inference request, read: its inputs as arrays, and the outputs asked for
    (name -> as binary?; empty: every output, each as `binary_default`)."""

    id: str | None
    parameters: dict[str, Any]
    inputs: dict[str, np.ndarray]
    outputs: dict[str, bool] = field(default_factory=dict)
    binary_default: bool = False


def read_request(body: bytes, header_length: str | None, model: ModelMetadata) -> InferRequest:
    """An inference request's body (`header_length`: its `Inference-Header-Content-Length`,
    when binary tensors follow the JSON), checked against `model`'s inputs and outputs."""
    head, tail = _split(body, header_length)
    try:
        message = orjson.loads(head)
    except orjson.JSONDecodeError as error:
        raise RequestError(f"the request is not JSON: {error}") from None
    if not isinstance(message, dict):
        raise RequestError("the request must be a JSON object with 'inputs'")
    request_id = message.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise RequestError("'id' must be a string")
    parameters = _parameters(message, "the request")
    binary_default = parameters.get("binary_data_output", False)
    if not isinstance(binary_default, bool):
        raise RequestError("parameter 'binary_data_output' must be true or false")
    inputs = _inputs(message.get("inputs"), memoryview(tail), model)
    return InferRequest(request_id, parameters, inputs, _outputs(message.get("outputs"), model), binary_default)


def _split(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    if header_length is None:
        return body, b""
    text = header_length.strip()
    if not text.isdigit() or len(text) > 19:
        raise RequestError(f"Inference-Header-Content-Length must be a number of bytes (got {text[:40]!r})")
    length = int(text)
    if length > len(body):
        raise RequestError(f"Inference-Header-Content-Length is {length}; the body has {len(body)} bytes")
    return body[:length], body[length:]


def _parameters(message: Mapping[str, Any], what: str) -> dict[str, Any]:
    parameters = message.get("parameters", {})
    if not isinstance(parameters, dict):
        raise RequestError(f"{what}: 'parameters' must be an object")
    return parameters


def _inputs(raw: Any, binary: memoryview, model: ModelMetadata) -> dict[str, np.ndarray]:
    if not isinstance(raw, list) or not raw:
        raise RequestError("'inputs' must be a list of tensors")
    arrays: dict[str, np.ndarray] = {}
    at = 0
    for index, tensor in enumerate(raw):
        if not isinstance(tensor, dict):
            raise RequestError(f"inputs[{index}] must be an object")
        name = tensor.get("name")
        if not isinstance(name, str):
            raise RequestError(f"inputs[{index}]: 'name' must be a string")
        datatype, shape = tensor.get("datatype"), tensor.get("shape")
        what, spec = declared_input(name, datatype, model, arrays)
        try:
            size = _parameters(tensor, what).get("binary_data_size")
            if size is None:
                if "data" not in tensor:
                    raise RequestError(f"{what} has no 'data' (nor a binary_data_size parameter)")
                array = from_json(what, spec.datatype.value, shape, tensor["data"])
            else:
                if type(size) is not int or size < 0:
                    raise RequestError(f"{what}: binary_data_size must be a number of bytes")
                if at + size > len(binary):
                    raise RequestError(
                        f"{what}: binary_data_size is {size} bytes; {len(binary) - at} bytes of binary data are left"
                    )
                array = from_binary(what, spec.datatype.value, shape, binary[at : at + size])
                at += size
        except TensorError as error:
            raise RequestError(str(error)) from None
        arrays[name] = fitted_input(what, array, spec)
    if at != len(binary):
        raise RequestError(f"{len(binary) - at} bytes of binary data follow the JSON that no input's binary_data_size claims")
    return complete_inputs(arrays, model)


# --- the checks every transport's request and answer pass (REST here, gRPC in `grpc_messages`) ---


def known_model(name: str, version: str | None, model: ModelMetadata) -> None:
    """Refuses (`UnknownModel`) a model name or version the endpoint does not serve (`version`
    None or empty: any)."""
    if name != model.name:
        raise UnknownModel(f"unknown model '{name[:128]}': this endpoint serves '{model.name}'")
    if version and version != model.version:
        raise UnknownModel(f"model '{name}' has no version '{version[:80]}' (it has '{model.version}')")


def declared_input(name: str, datatype: Any, model: ModelMetadata, seen: Mapping[str, Any]) -> tuple[str, TensorConfig]:
    """How an input named `name` is spoken of in errors, and its declared tensor: refuses an input
    the model does not take, one already in `seen`, or one of another datatype."""
    what = f"input '{name[:128]}'"
    spec = next((tensor for tensor in model.inputs if tensor.name == name), None)
    if spec is None:
        raise RequestError(f"{what} is not an input of model '{model.name}' (it takes {_names(model.inputs)})")
    if name in seen:
        raise RequestError(f"{what} is given twice")
    if datatype != spec.datatype.value:
        raise RequestError(f"{what}: datatype must be {spec.datatype.value} (got {str(datatype)[:20]!r})")
    return what, spec


def fitted_input(what: str, array: np.ndarray, spec: TensorConfig) -> np.ndarray:
    """`array`, when its shape fits the declared one."""
    if not shape_fits(array.shape, spec.shape):
        raise RequestError(f"{what}: shape {list(array.shape)} does not fit the model's {list(spec.shape)}")
    return array


def complete_inputs(arrays: dict[str, np.ndarray], model: ModelMetadata) -> dict[str, np.ndarray]:
    """`arrays`, when it holds every input the model takes."""
    missing = [tensor.name for tensor in model.inputs if tensor.name not in arrays]
    if missing:
        raise RequestError(f"input '{missing[0]}' is missing (model '{model.name}' takes {_names(model.inputs)})")
    return arrays


def declared_output(name: str, model: ModelMetadata, asked: Mapping[str, Any]) -> str:
    """How an asked-for output is spoken of in errors: refuses one the model does not have, or asked twice."""
    what = f"output '{name[:128]}'"
    if all(tensor.name != name for tensor in model.outputs):
        raise RequestError(f"{what} is not an output of model '{model.name}' (it has {_names(model.outputs)})")
    if name in asked:
        raise RequestError(f"{what} is asked for twice")
    return what


def answer_arrays(request: InferRequest, results: Any, model: ModelMetadata) -> list[tuple[str, str, np.ndarray]]:
    """The outputs `request` asked for (none named: every output), each as (name, datatype,
    array), from what predict() returned (a mapping of output name to array-like), checked
    against the model's outputs (`AnswerError`)."""
    if not isinstance(results, Mapping):
        raise AnswerError(f"predict returned {type(results).__name__}; it must return a dict of output name to array")
    declared = {tensor.name: tensor for tensor in model.outputs}
    unknown = [name for name in results if name not in declared]
    if unknown:
        raise AnswerError(f"predict returned output '{unknown[0]}', which is not in the model's [v2] outputs")
    answered: list[tuple[str, str, np.ndarray]] = []
    for name in request.outputs or declared:
        spec = declared[name]
        if name not in results:
            raise AnswerError(f"predict returned no output '{name}'")
        what = f"output '{name}'"
        datatype = spec.datatype.value
        try:
            array = as_datatype(what, results[name], datatype)
        except TensorError as error:
            raise AnswerError(str(error)) from None
        if not shape_fits(array.shape, spec.shape):
            raise AnswerError(f"predict returned {what} of shape {list(array.shape)}; the model's is {list(spec.shape)}")
        answered.append((name, datatype, array))
    return answered


def _outputs(raw: Any, model: ModelMetadata) -> dict[str, bool]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise RequestError("'outputs' must be a list")
    asked: dict[str, bool] = {}
    for index, tensor in enumerate(raw):
        name = tensor.get("name") if isinstance(tensor, dict) else None
        if not isinstance(name, str):
            raise RequestError(f"outputs[{index}]: 'name' must be a string")
        what = declared_output(name, model, asked)
        binary = _parameters(tensor, what).get("binary_data")
        if binary is not None and not isinstance(binary, bool):
            raise RequestError(f"{what}: parameter 'binary_data' must be true or false")
        asked[name] = binary  # type: ignore[assignment]  # None: as the request's binary_data_output says
    return asked


def write_answer(request: InferRequest, results: Any, model: ModelMetadata) -> tuple[bytes, int | None]:
    """The answer to `request` from what predict() returned (a mapping of output name to
    array-like): its body, and the length of its JSON when binary outputs follow it."""
    outputs: list[dict[str, Any]] = []
    tail: list[bytes] = []
    for name, datatype, array in answer_arrays(request, results, model):
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        binary = request.outputs.get(name)
        if request.binary_default if binary is None else binary:
            data = to_binary(array, datatype)
            entry["parameters"] = {"binary_data_size": len(data)}
            tail.append(data)
        else:
            try:
                entry["data"] = to_json(f"output '{name}'", array, datatype)
            except TensorError as error:
                raise RequestError(str(error)) from None
        outputs.append(entry)
    answer: dict[str, Any] = {"model_name": model.name, "model_version": model.version}
    if request.id is not None:
        answer["id"] = request.id
    answer["outputs"] = outputs
    head = orjson.dumps(answer, option=orjson.OPT_SERIALIZE_NUMPY)
    return (head + b"".join(tail), len(head)) if tail else (head, None)


def _names(tensors: tuple[TensorConfig, ...]) -> str:
    shown = ", ".join(f"'{tensor.name}'" for tensor in tensors[:8])
    return shown + (f" and {len(tensors) - 8} more" if len(tensors) > 8 else "")
