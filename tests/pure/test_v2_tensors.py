"""v2 tensors to and from numpy (`ray_gitops.v2.tensors`): every datatype both ways in every encoding,
shapes flattened or nested, BYTES, and the refusals that keep a hostile request bounded."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_gitops.v2.tensors import (
    DATATYPES,
    TYPED_CONTENTS,
    TensorError,
    as_datatype,
    datatype_of,
    element_count,
    from_binary,
    from_json,
    from_typed,
    shape_fits,
    to_binary,
    to_json,
    to_typed,
)

NUMERIC = [name for name in DATATYPES if name != "BYTES"]


def sample(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    if datatype == "BOOL":
        return (np.arange(count) % 3 == 0).reshape(shape)
    values = np.arange(count) % 100 - (0 if datatype.startswith("UINT") else 50)
    return values.astype(DATATYPES[datatype]).reshape(shape)


@pytest.mark.parametrize("datatype", NUMERIC)
@pytest.mark.parametrize("shape", [(0,), (1,), (6,), (2, 3), (1, 2, 3), (3, 0, 2)])
def test_every_numeric_datatype_round_trips_through_json_and_binary(datatype: str, shape: tuple[int, ...]) -> None:
    array = sample(datatype, shape)
    as_json = orjson.loads(orjson.dumps(to_json("t", array, datatype), option=orjson.OPT_SERIALIZE_NUMPY))
    back = from_json("t", datatype, list(shape), as_json)
    assert back.dtype == DATATYPES[datatype] and back.shape == shape and np.array_equal(back, array)
    raw = to_binary(array, datatype)
    assert len(raw) == array.size * DATATYPES[datatype].itemsize
    back = from_binary("t", datatype, list(shape), memoryview(raw))
    assert back.dtype == DATATYPES[datatype] and back.shape == shape and np.array_equal(back, array)


def test_binary_is_little_endian_row_major_without_padding() -> None:
    array = np.array([[1, 2], [3, 4]], dtype=np.int16)
    assert to_binary(array, "INT16") == struct.pack("<4h", 1, 2, 3, 4)
    assert to_binary(array.T, "INT16") == struct.pack("<4h", 1, 3, 2, 4)  # a transposed view: its own row-major order
    assert to_binary(np.array([True, False, True]), "BOOL") == b"\x01\x00\x01"
    big_endian = np.array([1.5, -2.0], dtype=">f4")
    assert to_binary(big_endian, "FP32") == struct.pack("<2f", 1.5, -2.0)


def test_json_data_may_be_nested_row_major() -> None:
    nested = from_json("x", "INT32", [2, 3], [[1, 2, 3], [4, 5, 6]])
    flat = from_json("x", "INT32", [2, 3], [1, 2, 3, 4, 5, 6])
    assert np.array_equal(nested, flat) and nested.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_bytes_are_utf8_strings_in_json_and_length_prefixed_in_binary() -> None:
    array = from_json("s", "BYTES", [3], ["", "héllo", "x"])
    assert array.dtype == object and list(array) == [b"", "héllo".encode(), b"x"]
    raw = to_binary(array, "BYTES")
    assert raw == b"\x00\x00\x00\x00" + struct.pack("<I", 6) + "héllo".encode() + b"\x01\x00\x00\x00x"
    assert list(from_binary("s", "BYTES", [3], memoryview(raw))) == list(array)
    assert to_json("s", array, "BYTES") == ["", "héllo", "x"]


def test_bytes_that_are_not_utf8_must_be_asked_for_as_binary() -> None:
    no_json = "output 'y': BYTES elements that are not UTF-8 text have no JSON form; ask for it with binary_data"
    with pytest.raises(TensorError, match=no_json):
        to_json("output 'y'", np.array([b"\xff"], dtype=object), "BYTES")


@given(st.lists(st.binary(max_size=40), max_size=20))
def test_any_bytes_elements_round_trip_binary(elements: list[bytes]) -> None:
    array = np.empty(len(elements), dtype=object)
    array[:] = elements
    back = from_binary("b", "BYTES", [len(elements)], memoryview(to_binary(array, "BYTES")))
    assert list(back) == elements


@pytest.mark.parametrize(
    "datatype, shape, data, message",
    [
        ("FP32", [2, 2], [1.0, 2.0, 3.0], r"input 'x': shape \[2, 2\] holds 4 elements; data has 3"),
        ("FP32", [2], [1.0, 2.0, 3.0], r"shape \[2\] holds 2 elements; data has 3"),
        ("FP32", [10**9, 10**9], [1.0], r"shape \[1000000000, 1000000000\] holds 1000000000000000000 elements; data has 1"),
        ("FP32", [-1, 2], [1.0, 2.0], r"shape \[-1, 2\] must hold sizes >= 0"),
        ("FP32", [2.0], [1.0, 2.0], r"must hold sizes >= 0"),
        ("FP32", "2", [1.0, 2.0], r"shape must be a list of at most 16 sizes"),
        ("FP32", [1] * 17, [1.0], r"shape must be a list of at most 16 sizes"),
        ("FP32", [2], "12", r"data must be a list"),
        ("FP32", [2], [1.0, "2"], r"FP32 data must be numbers"),
        ("FP32", [2], [1.0, True], r"FP32 data must be numbers"),
        ("INT8", [2], [1, 2.5], r"INT8 data must be integers"),
        ("INT8", [2], [1, 128], r"128 is out of range for INT8 \(-128..127\)"),
        ("UINT8", [1], [-1], r"-1 is out of range for UINT8 \(0..255\)"),
        ("UINT64", [1], [2**64], r"18446744073709551616 is out of range for UINT64"),
        ("BOOL", [2], [True, 1], r"BOOL data must be true or false"),
        ("BYTES", [2], ["a", 1], r"BYTES data must be strings"),
        ("INT32", [2], [[[1]], [2]], r"data is nested deeper than its shape's 1 dimensions"),
        ("FP48", [1], [1.0], r"datatype 'FP48' is not one of BOOL, UINT8"),
    ],
)
def test_json_tensors_that_do_not_match_their_shape_or_datatype_are_refused(datatype, shape, data, message) -> None:
    with pytest.raises(TensorError, match=message):
        from_json("input 'x'", datatype, shape, data)


def test_a_huge_json_list_stops_being_flattened_past_its_shape() -> None:
    nested = [[1.0] * 1000 for _ in range(1000)]
    with pytest.raises(TensorError, match="shape \\[2, 2\\] holds 4 elements; data has more"):
        from_json("x", "FP32", [2, 2], nested)


@pytest.mark.parametrize(
    "datatype, shape, raw, message",
    [
        ("FP32", [2, 2], b"\x00" * 12, r"binary_data_size is 12 bytes; shape \[2, 2\] of FP32 is 16"),
        ("FP32", [2, 2], b"\x00" * 20, r"binary_data_size is 20 bytes; shape \[2, 2\] of FP32 is 16"),
        ("FP64", [10**12], b"\x00" * 8, r"binary_data_size is 8 bytes; shape \[1000000000000\] of FP64 is 8000000000000"),
        ("BOOL", [2], b"\x01\x02", r"BOOL elements are bytes 0 or 1"),
        ("BYTES", [10**9], b"\x00" * 8, r"too few for the 1000000000 BYTES elements"),
        ("BYTES", [1], b"\xff\xff\xff\xff", r"BYTES element 0 says 4294967295 bytes; 0 are left"),
        ("BYTES", [2], b"\x01\x00\x00\x00ab\x00\x00", r"BYTES element 1 has no length: the binary data ends at byte 5"),
        ("BYTES", [1], b"\x01\x00\x00\x00ab", r"1 bytes are left after its 1 BYTES elements"),
    ],
)
def test_binary_tensors_whose_size_does_not_match_are_refused(datatype, shape, raw, message) -> None:
    with pytest.raises(TensorError, match=message):
        from_binary("input 'x'", datatype, shape, memoryview(raw))


def test_a_binary_tensor_is_a_read_only_view_of_the_body() -> None:
    body = bytearray(np.arange(4, dtype="<f4").tobytes())
    array = from_binary("x", "FP32", [4], memoryview(bytes(body)))
    assert not array.flags.writeable and array.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_element_count_is_a_python_product_never_an_allocation() -> None:
    assert element_count([2**40, 2**40], "x") == 2**80
    assert element_count([], "x") == 1
    assert element_count([3, 0], "x") == 0


@pytest.mark.parametrize(
    "shape, declared, fits",
    [((2, 3), (-1, 3), True), ((2, 3), (2, 3), True), ((2, 4), (-1, 3), False), ((6,), (-1, 3), False), ((), (), True)],
)
def test_a_shape_fits_the_declared_one_where_it_is_not_minus_one(shape, declared, fits) -> None:
    assert shape_fits(shape, declared) is fits


def test_predict_outputs_are_converted_to_the_declared_datatype_when_they_can_be() -> None:
    assert as_datatype("y", [1, 2], "FP32").dtype == np.float32
    assert as_datatype("y", np.array([1, 2], dtype=np.int64), "INT8").dtype == np.int8
    assert as_datatype("y", 3.5, "FP64").shape == ()
    assert list(as_datatype("y", ["a", b"b"], "BYTES")) == [b"a", b"b"]
    with pytest.raises(TensorError, match="y: predict returned float64 elements for INT32"):
        as_datatype("y", [1.5], "INT32")
    with pytest.raises(TensorError, match="y: predict returned int64 elements for BOOL"):
        as_datatype("y", [1], "BOOL")
    with pytest.raises(TensorError, match="y: a BYTES element is int, not bytes or str"):
        as_datatype("y", [1], "BYTES")


def test_numpy_dtypes_name_their_v2_datatype() -> None:
    assert [datatype_of(np.zeros(1, dtype=DATATYPES[name])) for name in NUMERIC] == NUMERIC
    assert datatype_of(np.array(["a"])) == "BYTES"
    with pytest.raises(TensorError, match="complex128 has no v2 datatype"):
        datatype_of(np.zeros(1, dtype=complex))


# --- the gRPC messages' typed contents ---------------------------------------------------------


@pytest.mark.parametrize("datatype", [name for name in DATATYPES if name != "FP16"])
def test_typed_contents_round_trip_every_datatype_but_fp16(datatype: str) -> None:
    if datatype == "BYTES":  # any bytes: typed contents need no UTF-8, unlike JSON
        array = np.array([b"a", b"", b"\xff\x00", "é".encode(), b"bc", b"d"], dtype=object).reshape(2, 3)
    else:
        array = sample(datatype, (2, 3))
    values = to_typed("output 'y'", array, datatype)
    assert len(values) == 6 and all(not isinstance(value, np.generic) for value in values)  # plain values
    back = from_typed("input 'x'", datatype, [2, 3], values)
    assert back.shape == (2, 3) and back.tolist() == array.tolist()
    if datatype != "BYTES":
        assert back.dtype == DATATYPES[datatype]


def test_fp16_has_no_typed_contents_either_way() -> None:
    assert "FP16" not in TYPED_CONTENTS
    with pytest.raises(TensorError, match=r"input 'x': FP16 has no typed contents in the gRPC messages: send it raw"):
        from_typed("input 'x'", "FP16", [1], [1.0])
    with pytest.raises(TensorError, match="FP16 has no typed contents"):
        to_typed("output 'y'", np.zeros(1, dtype=np.float16), "FP16")


@pytest.mark.parametrize(("datatype", "shape", "values", "message"), [
    ("FP32", [2, 2], [1.0, 2.0, 3.0], r"input 'x': shape \[2, 2\] holds 4 elements; its fp32_contents has 3"),
    ("INT8", [2], [1, 128], r"input 'x': 128 is out of range for INT8 \(-128\.\.127\)"),
    ("UINT16", [1], [70000], r"input 'x': 70000 is out of range for UINT16"),
    ("FP32", [-1], [], r"input 'x': shape \[-1\] must hold sizes >= 0"),
    ("FP99", [1], [1.0], r"input 'x': datatype 'FP99' is not one of"),
])
def test_typed_contents_the_shape_or_the_datatype_refuses(
    datatype: str, shape: list[int], values: list[object], message: str
) -> None:
    with pytest.raises(TensorError, match=message):
        from_typed("input 'x'", datatype, shape, values)


def test_typed_contents_of_no_elements_are_an_empty_array_of_the_shape() -> None:
    empty = from_typed("input 'x'", "INT16", [0, 3], [])
    assert empty.shape == (0, 3) and empty.dtype == np.int16
