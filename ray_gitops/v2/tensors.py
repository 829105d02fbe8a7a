"""Tensors of the Open Inference Protocol (v2) to and from numpy arrays.

Owns one tensor's conversions, both ways and in every encoding: JSON `data`
(row-major, flattened or nested; BYTES as UTF-8 strings), the binary
tensor data extension (little-endian, row-major, no padding; BOOL one byte
each; BYTES each a 4-byte little-endian length and its bytes), which is also
the gRPC messages' `raw_input_contents` and `raw_output_contents`, and the
gRPC messages' typed contents (`TYPED_CONTENTS`: the values of one repeated
field of `InferTensorContents`, row-major, each datatype in its field). Every
conversion is bounded by what the client sent: a declared shape is checked
against the data's element count, and a binary size against the shape,
before anything is allocated, so a hostile `shape` or `binary_data_size`
costs nothing. A request's tensor that cannot be read raises `TensorError`,
whose text is for the client (the app answers 400). Pure: values in, values
out; `ray_gitops.v2.protocol` places tensors in requests and answers.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Sequence

import numpy as np

from vocabulary.spec.v2 import MAX_TENSOR_RANK

__all__ = [
    "TensorError",
    "DATATYPES",
    "datatype_of",
    "element_count",
    "shape_fits",
    "from_json",
    "from_binary",
    "as_datatype",
    "to_json",
    "to_binary",
    "TYPED_CONTENTS",
    "typed_field",
    "from_typed",
    "to_typed",
]


class TensorError(ValueError):
    """A tensor that cannot be read or written as asked; the text says which and why."""


# Each v2 datatype's numpy dtype, little-endian as the wire is (BYTES: Python bytes objects).
DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BYTES": np.dtype(object),
}
# Each datatype's field of the gRPC messages' `InferTensorContents` (FP16 has none: raw contents only).
TYPED_CONTENTS: dict[str, str] = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
_BY_KIND_SIZE = {(dtype.kind, dtype.itemsize): name for name, dtype in DATATYPES.items() if name != "BYTES"}
_LENGTH = struct.Struct("<I")
# The numpy kinds an answer's array may have for a datatype's kind: no float becomes an integer unasked.
_CONVERTIBLE = {"b": "b", "u": "iu", "i": "iu", "f": "iuf"}


def datatype_of(array: np.ndarray) -> str:
    """The v2 datatype of a numpy array (str, bytes and object arrays: BYTES)."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    name = _BY_KIND_SIZE.get((array.dtype.kind, array.dtype.itemsize))
    if name is None:
        raise TensorError(f"numpy dtype {array.dtype} has no v2 datatype")
    return name


def element_count(shape: Any, what: str) -> int:
    """The number of elements of `shape` (a list of sizes >= 0), or TensorError. Python
    integers: a hostile shape's product is a big number, never an allocation."""
    if not isinstance(shape, list) or len(shape) > MAX_TENSOR_RANK:
        raise TensorError(f"{what}: shape must be a list of at most {MAX_TENSOR_RANK} sizes")
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise TensorError(f"{what}: shape {_shown(shape)} must hold sizes >= 0")
    return math.prod(shape)


def shape_fits(shape: Sequence[int], declared: Sequence[int]) -> bool:
    """`shape` has the declared rank and each declared size (-1: any)."""
    return len(shape) == len(declared) and all(want in (-1, got) for got, want in zip(shape, declared))


def from_json(what: str, datatype: str, shape: Any, data: Any) -> np.ndarray:
    """The array a request's JSON `data` holds: flattened or nested row-major,
    exactly `shape`'s element count (`shape` as the request wrote it: checked
    here), each element of `datatype`'s JSON type."""
    count = element_count(shape, what)
    flat = _flattened(what, data, len(shape), count)
    if len(flat) != count:
        has = "more" if flat is not data and len(flat) > count else len(flat)  # nested: flattening stopped past count
        raise TensorError(f"{what}: shape {_shown(shape)} holds {count} elements; data has {has}")
    if datatype == "BYTES":
        if not all(type(value) is str for value in flat):
            raise TensorError(f"{what}: BYTES data must be strings")
        array = np.empty(count, dtype=object)
        array[:] = [value.encode("utf-8") for value in flat]
        return array.reshape(shape)
    dtype = _dtype(what, datatype)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    if datatype == "BOOL":
        if not all(type(value) is bool for value in flat):
            raise TensorError(f"{what}: BOOL data must be true or false")
    elif dtype.kind in "iu":
        if not all(type(value) is int for value in flat):
            raise TensorError(f"{what}: {datatype} data must be integers")
        low, high, bounds = min(flat), max(flat), np.iinfo(dtype)
        if low < bounds.min or high > bounds.max:
            wrong = low if low < bounds.min else high
            raise TensorError(f"{what}: {wrong} is out of range for {datatype} ({bounds.min}..{bounds.max})")
    elif not all(type(value) is int or type(value) is float for value in flat):
        raise TensorError(f"{what}: {datatype} data must be numbers")
    return np.array(flat, dtype=dtype).reshape(shape)


def _flattened(what: str, data: Any, rank: int, count: int) -> list[Any]:
    """`data`'s elements in row-major order; nested no deeper than `rank`, and
    stopped as soon as there are more than `count`."""
    if not isinstance(data, list):
        raise TensorError(f"{what}: data must be a list")
    if not any(isinstance(value, list) for value in data):
        return data
    flat: list[Any] = []
    stack: list[tuple[list[Any], int, int]] = [(data, 0, 1)]  # (list, next index, depth)
    while stack:
        items, index, depth = stack.pop()
        while index < len(items):
            value = items[index]
            index += 1
            if isinstance(value, list):
                if depth >= max(rank, 1):
                    raise TensorError(f"{what}: data is nested deeper than its shape's {rank} dimensions")
                stack.append((items, index, depth))
                items, index, depth = value, 0, depth + 1
                continue
            flat.append(value)
            if len(flat) > count:
                return flat
    return flat


def from_binary(what: str, datatype: str, shape: Any, raw: memoryview) -> np.ndarray:
    """The array `raw` (the tensor's `binary_data_size` bytes) holds, read-only: fixed-size
    datatypes are a view of the body, not a copy."""
    count = element_count(shape, what)
    if datatype == "BYTES":
        return _bytes_elements(what, shape, count, raw)
    dtype = _dtype(what, datatype)
    if len(raw) != count * dtype.itemsize:
        raise TensorError(
            f"{what}: binary_data_size is {len(raw)} bytes; shape {_shown(shape)} of {datatype} "
            f"is {count * dtype.itemsize}"
        )
    if datatype == "BOOL":
        octets = np.frombuffer(raw, dtype=np.uint8)
        if count and int(octets.max()) > 1:
            raise TensorError(f"{what}: BOOL elements are bytes 0 or 1")
        return octets.view(np.bool_).reshape(shape)
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _bytes_elements(what: str, shape: list[int], count: int, raw: memoryview) -> np.ndarray:
    # Each element takes 4 bytes at least: a count the size cannot hold is refused unread.
    if count * _LENGTH.size > len(raw):
        raise TensorError(
            f"{what}: binary_data_size is {len(raw)} bytes, too few for the {count} BYTES elements of shape {_shown(shape)}"
        )
    array = np.empty(count, dtype=object)
    at = 0
    for index in range(count):
        if at + _LENGTH.size > len(raw):
            raise TensorError(f"{what}: BYTES element {index} has no length: the binary data ends at byte {at}")
        (length,) = _LENGTH.unpack_from(raw, at)
        at += _LENGTH.size
        if at + length > len(raw):
            raise TensorError(f"{what}: BYTES element {index} says {length} bytes; {len(raw) - at} are left")
        array[index] = bytes(raw[at : at + length])
        at += length
    if at != len(raw):
        raise TensorError(f"{what}: {len(raw) - at} bytes are left after its {count} BYTES elements")
    return array.reshape(shape)


def typed_field(what: str, datatype: str) -> str:
    """The `InferTensorContents` field that holds `datatype`'s elements, or TensorError."""
    field = TYPED_CONTENTS.get(datatype)
    if field is None:
        _dtype(what, datatype)  # an unknown datatype says so
        raise TensorError(f"{what}: {datatype} has no typed contents in the gRPC messages: send it raw")
    return field


def from_typed(what: str, datatype: str, shape: Any, values: Sequence[Any]) -> np.ndarray:
    """The array a gRPC tensor's typed contents hold: `values` (its datatype's repeated field,
    row-major) are exactly `shape`'s element count, each in the datatype's range."""
    field = typed_field(what, datatype)
    count = element_count(shape, what)
    if len(values) != count:
        raise TensorError(f"{what}: shape {_shown(shape)} holds {count} elements; its {field} has {len(values)}")
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    dtype = _dtype(what, datatype)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    if dtype.kind in "iu" and dtype.itemsize < 4:  # INT8, INT16, UINT8, UINT16 travel in 32-bit fields
        low, high, bounds = min(values), max(values), np.iinfo(dtype)
        if low < bounds.min or high > bounds.max:
            wrong = low if low < bounds.min else high
            raise TensorError(f"{what}: {wrong} is out of range for {datatype} ({bounds.min}..{bounds.max})")
    return np.array(values, dtype=dtype).reshape(shape)


def to_typed(what: str, array: np.ndarray, datatype: str) -> list[Any]:
    """An array as its datatype's typed contents, flattened row-major."""
    typed_field(what, datatype)
    if datatype == "BYTES":
        return [bytes(element) for element in array.reshape(-1)]
    return list(array.reshape(-1).tolist())


def as_datatype(what: str, value: Any, datatype: str) -> np.ndarray:
    """What predict() returned for a tensor as an array of `datatype` (a list, a
    scalar or an array of another numeric type is converted when it can be)."""
    if datatype == "BYTES":
        array = np.asarray(value, dtype=object)
        flat = array.reshape(-1)
        for index, element in enumerate(flat):
            if isinstance(element, str):
                flat[index] = element.encode("utf-8")
            elif not isinstance(element, (bytes, bytearray, memoryview, np.bytes_)):
                raise TensorError(f"{what}: a BYTES element is {type(element).__name__}, not bytes or str")
        return array
    dtype = _dtype(what, datatype)
    try:
        array = np.asarray(value)
        if array.dtype.kind not in _CONVERTIBLE[dtype.kind]:
            raise TensorError(f"{what}: predict returned {array.dtype} elements for {datatype}")
        return array.astype(dtype, copy=False)
    except (TypeError, ValueError, OverflowError) as error:
        if isinstance(error, TensorError):
            raise
        raise TensorError(f"{what}: predict returned what is not a {datatype} array ({error})") from None


def to_json(what: str, array: np.ndarray, datatype: str) -> Any:
    """An array as JSON `data`, flattened row-major: a list, or the array itself for orjson's
    numpy serialiser (numeric datatypes). BYTES elements must be UTF-8 text."""
    if datatype != "BYTES":
        return np.ascontiguousarray(array.reshape(-1), dtype=array.dtype.newbyteorder("="))
    try:
        return [bytes(element).decode("utf-8") for element in array.reshape(-1)]
    except UnicodeDecodeError:
        raise TensorError(
            f"{what}: BYTES elements that are not UTF-8 text have no JSON form; ask for it with binary_data"
        ) from None


def to_binary(array: np.ndarray, datatype: str) -> bytes:
    """An array as the binary tensor data extension writes it."""
    if datatype != "BYTES":
        return np.ascontiguousarray(array, dtype=DATATYPES[datatype]).tobytes()
    parts: list[bytes] = []
    for element in array.reshape(-1):
        data = bytes(element)
        parts.append(_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def _dtype(what: str, datatype: str) -> np.dtype[Any]:
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        raise TensorError(f"{what}: datatype {_shown(datatype)} is not one of {', '.join(DATATYPES)}")
    return dtype


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
