"""Which endpoint a v2 gRPC call is for, when several serve `inference.GRPCInferenceService`.

The Open Inference Protocol's gRPC service (`V2_SERVICE`) names its model
inside the message, not in the path as REST's `/v2/models/NAME` does. So
that one gRPC port serves several v2 models as one HTTP port does, an
endpoint whose `route` is a model's REST path (`/v2/models/NAME`,
`model_of_route`) takes the calls whose message names that model: the
model methods (`MODEL_METHODS`: `ModelInfer`, `ModelMetadata`,
`ModelReady`) name it in their field 1 (`model_name`, `name`), which
`model_named` reads off the serialized message. Every other call of the
service (the server methods, a message naming no such model) goes to the
service's one other endpoint, if it has one (a route that is no model's
path, as `/v2`), else to the first of the model endpoints: the replicas
answer NOT_FOUND for a model they do not serve.

`model_named` reads the message's top-level fields only, skipping each by
its wire type and length without copying it (a `ModelInferRequest`'s
tensors are most of its bytes, and never looked at): protobuf's own
parser would build the whole message, or keep its tensors as unknown
fields. A message that is no protobuf, or whose field 1 is no UTF-8 string,
names no model. Values only.
"""

from __future__ import annotations

__all__ = ["V2_SERVICE", "MODEL_METHODS", "model_of_route", "model_named"]

# The protocol's gRPC service, as the proto's package and service name it.
V2_SERVICE = "inference.GRPCInferenceService"
# Its methods whose request names a model, in field 1 (ModelInferRequest.model_name, Model*Request.name).
MODEL_METHODS = frozenset({"ModelInfer", "ModelMetadata", "ModelReady"})
_MODEL_PATH = "/v2/models/"
_NAME_FIELD = 1
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


def model_of_route(route: str) -> str | None:
    """The model whose REST path `route` is (`/v2/models/NAME`, a trailing slash allowed), else None."""
    if not route.startswith(_MODEL_PATH):
        return None
    name = route[len(_MODEL_PATH):].rstrip("/")
    return name if name and "/" not in name else None


def model_named(message: bytes) -> str | None:
    """The model a model method's serialized request names (its field 1; the last one, as protobuf
    reads a repeated scalar), or None for a message without it or that is no protobuf."""
    name = None
    at, end = 0, len(message)
    try:
        while at < end:
            key, at = _varint(message, at)
            field, wire = key >> 3, key & 7
            if wire == _VARINT:
                _, at = _varint(message, at)
            elif wire == _FIXED64:
                at += 8
            elif wire == _FIXED32:
                at += 4
            elif wire == _LENGTH:
                length, at = _varint(message, at)
                if field == _NAME_FIELD and at + length <= end:
                    name = message[at : at + length].decode()
                at += length
            else:  # groups (3, 4) are in no v2 message; 6 and 7 are no wire type
                return None
    except (IndexError, UnicodeDecodeError):
        return None
    return name if at == end else None


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at `at` and where it ends; raises IndexError past the data or past 10 bytes."""
    value = shift = 0
    for _ in range(10):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
    raise IndexError("a varint longer than 10 bytes")
