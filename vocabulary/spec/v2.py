"""A backend's `protocol = "v2"` and its `[v2]` table: the Open Inference Protocol, and its rules.

A backend with `protocol = "v2"` serves the Open Inference Protocol (KServe's
and Triton's "v2" REST API, `ray_gitops.v2`) over its `import_path`, which
names a model class with `predict(inputs) -> outputs` instead of a request
handler. Its `[v2]` table (`V2Config`) is the model's metadata as v2 clients
read it: the name they address, its platform, the `[models.NAME]` entry whose
digest is its version, and its input and output tensors (`TensorConfig`:
name, datatype, shape with -1 for a variable dimension). `v2_problem` is the
rule between the two keys and the rest of the backend. Values only.
"""

from __future__ import annotations

import enum
import re
from typing import Any, Sequence

from pydantic import Field, field_validator

from vocabulary.spec.base import Value

__all__ = [
    "BackendProtocol", "TensorDatatype", "TensorConfig", "V2Config", "MAX_TENSOR_RANK", "MAX_TENSORS",
    "tensor_name", "tensor_shape", "tensors_problem", "v2_problem",
]

# Dimensions a declared tensor may have: more is no model's shape, only a hostile header's.
MAX_TENSOR_RANK = 16
# Tensors a model may declare on each side.
MAX_TENSORS = 256
# Names v2 clients put in a URL path and in JSON: a model's, a tensor's.
_V2_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")


class BackendProtocol(str, enum.Enum):
    """What a backend's replicas speak, when not plain HTTP to their handler."""

    V2 = "v2"  # the Open Inference Protocol over a model class's predict()


class TensorDatatype(str, enum.Enum):
    """The Open Inference Protocol's tensor data types."""

    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"


def _v2_name(value: str) -> str:
    if _V2_NAME.fullmatch(value) is None:
        raise ValueError(f"must be 1-128 letters, digits, '_', '.', ':' or '-', not starting with '.', ':' or '-' "
                         f"(got {value[:40]!r})")
    return value


class TensorConfig(Value):
    """One input or output tensor of a v2 model, as its metadata says it."""

    name: str = Field(description="The tensor's name, as requests and answers carry it.")
    datatype: TensorDatatype = Field(
        description="BOOL, UINT8, UINT16, UINT32, UINT64, INT8, INT16, INT32, INT64, FP16, FP32, FP64 or BYTES."
    )
    shape: tuple[int, ...] = Field(
        description="Its dimensions, -1 for one that varies (the batch, a sequence): a request's tensor must "
        "have as many, each equal where this one is not -1."
    )

    @field_validator("name")
    @classmethod
    def _tensor_name(cls, value: str) -> str:
        return tensor_name(value)

    @field_validator("shape")
    @classmethod
    def _dimensions(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        tensor_shape(value)
        return value


class V2Config(Value):
    """A v2 backend's model metadata (docs/guides/v2.md): what `GET /v2/models/NAME` answers and
    what `infer` checks a request's tensors against."""

    name: str | None = Field(
        default=None, description="The model's name in the v2 paths (/v2/models/NAME/infer); none: the backend's name."
    )
    platform: str = Field(
        default="python", max_length=128,
        description="The platform its metadata says (e.g. onnxruntime_onnx, pytorch_torchscript, sklearn).",
    )
    model: str | None = Field(
        default=None,
        description="The [models.NAME] entry (one of the backend's `models`) whose sha256 digest is the model's "
        "version; none: the backend's code version.",
    )
    inputs: tuple[TensorConfig, ...] = Field(description="The input tensors predict() receives, by name.")
    outputs: tuple[TensorConfig, ...] = Field(description="The output tensors predict() returns, by name.")

    @field_validator("name")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        return None if value is None else tensor_name(value)

    @field_validator("inputs", "outputs")
    @classmethod
    def _named_once(cls, value: tuple[Any, ...]) -> tuple[Any, ...]:
        return tensors_problem(value)


def tensor_name(value: str) -> str:
    """A tensor's or a model's name as v2 clients write it in a URL path and in JSON (else ValueError)."""
    return _v2_name(value)


def tensor_shape(value: Sequence[int]) -> Sequence[int]:
    """A declared shape: at most MAX_TENSOR_RANK dimensions, each a size or -1 (else ValueError)."""
    if len(value) > MAX_TENSOR_RANK:
        raise ValueError(f"has {len(value)} dimensions; at most {MAX_TENSOR_RANK}")
    wrong = [dim for dim in value if dim < -1]
    if wrong:
        raise ValueError(f"dimensions are sizes >= 0, or -1 for one that varies (got {wrong[0]})")
    return value


def tensors_problem(value: Sequence[Any]) -> Any:
    """A model's inputs or outputs: 1 to MAX_TENSORS tensors, each name once (else ValueError)."""
    if not value:
        raise ValueError("must list at least one tensor ({ name = ..., datatype = ..., shape = [...] })")
    if len(value) > MAX_TENSORS:
        raise ValueError(f"lists {len(value)} tensors; at most {MAX_TENSORS}")
    names = [tensor.name for tensor in value]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"names tensor '{twice[0]}' twice")
    return value


def v2_problem(backend: Any, models: Sequence[str]) -> str | None:
    """Why a backend's `protocol` and `[v2]` table cannot run as written, or None.

    `protocol = "v2"` needs a `[v2]` table (its tensors), a `[v2]` table needs
    the protocol, the version's model is one of the backend's `models`, and a
    v2 backend takes one request a call from one model set (no `batching`, no
    `multiplex`: the protocol batches inside a tensor)."""
    protocol, v2 = getattr(backend, "protocol", None), getattr(backend, "v2", None)
    if protocol is None and v2 is None:
        return None
    if v2 is None:
        return 'protocol = "v2" needs a [v2] table: the model\'s inputs and outputs (docs/guides/v2.md)'
    if protocol is None:
        return 'a [v2] table is read only with protocol = "v2": add it, or remove the table'
    if v2.model is not None and v2.model not in models:
        return f"v2.model '{v2.model}' is not in this backend's models: add it (models = [\"{v2.model}\"])"
    for key in ("batching", "multiplex"):
        if getattr(backend, key, None) is not None:
            return f'{key} cannot be set with protocol = "v2": a v2 request carries its batch in its tensors'
    return None
