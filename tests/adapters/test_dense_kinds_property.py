"""Property (issue 20): any dense tensor or array, whatever its shape, strides, dtype and storage offset,
reads back equal, bit for bit, to what the framework says its values are.

Random torch tensors are ``as_strided`` views of random bytes (zero strides, overlapping
elements, offsets into the storage, every dtype of the table), sometimes wrapped in an
``nn.Parameter`` or given a conjugate bit; random NumPy arrays are views of random bytes with
steps, reversed axes (negative strides) and zero strides. Bounded to a few dozen examples each,
so the property runs in seconds.
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.format.dtypes import numpy_dtype
from opencheckpoint.testing.tensor_kinds import assert_same_values, expected_values

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _round_trip(value: Any) -> Any:
    with tempfile.TemporaryDirectory() as directory:
        path = Checkpoint(s={"leaf": value}, durable=False).save(Path(directory) / uuid.uuid4().hex)
        return read_component(path, "s")["leaf"]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """A shape, non-negative strides (zero and overlapping ones too) and a storage offset, in elements."""
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    strides = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    return shape, strides, draw(st.integers(0, 7))


def _span(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> int:
    """Elements a storage needs for this layout."""
    if 0 in shape:
        return offset
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))


@SETTINGS
@given(layout=layouts(), data=st.data())
def test_any_dense_torch_tensor_reads_back_bit_for_bit(layout: tuple[Any, ...], data: st.DataObject) -> None:
    torch = pytest.importorskip("torch")
    from opencheckpoint.adapters.torch import TORCH_DTYPES

    name = data.draw(st.sampled_from(sorted(TORCH_DTYPES)), label="dtype")
    dtype = TORCH_DTYPES[name]
    shape, strides, offset = layout
    count = max(_span(shape, strides, offset), 1)
    raw = data.draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize), label="bytes")
    if name == "bool":  # a bool tensor's bytes other than 00/01 are stored as 01: compare canonical values
        raw = bytes(b & 1 for b in raw)
    base = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype)
    tensor = base.as_strided(shape, strides, offset)
    wrap = data.draw(st.sampled_from(["plain", "parameter", "conj"]), label="wrap")
    if wrap == "parameter" and dtype.is_floating_point:
        tensor = torch.nn.Parameter(tensor, requires_grad=False)
    elif wrap == "conj" and dtype.is_complex:
        tensor = tensor.conj()
    expected = expected_values(tensor)
    assert_same_values(expected, _round_trip(tensor))


DTYPE_NAMES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn", "float8_e5m2"]


@SETTINGS
@given(layout=layouts(), data=st.data())
def test_any_numpy_array_view_reads_back_bit_for_bit(layout: tuple[Any, ...], data: st.DataObject) -> None:
    dtype = numpy_dtype(data.draw(st.sampled_from(DTYPE_NAMES), label="dtype")).newbyteorder("<")
    shape, strides, offset = layout
    count = max(_span(shape, strides, offset), 1)
    raw = bytearray(data.draw(st.binary(min_size=count * dtype.itemsize, max_size=count * dtype.itemsize)))
    # as_strided goes through __array_interface__, which cannot name the ml_dtypes types: stride a
    # same-width unsigned view, then view it as the dtype (same itemsize: any strides allowed)
    carrier = np.dtype(f"<u{dtype.itemsize}") if dtype.itemsize <= 8 else dtype
    base = np.frombuffer(raw, dtype=carrier)
    array = np.lib.stride_tricks.as_strided(base[offset:] if offset < len(base) else base[len(base):], shape,
                                            tuple(s * dtype.itemsize for s in strides), writeable=False)
    array = array.view(dtype)
    flips = data.draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)), label="reversed axes")
    if shape:  # (indexing a 0-d array with () would give a scalar)
        array = array[tuple(slice(None, None, -1) if flip else slice(None) for flip in flips)]  # negative strides
    assert_same_values(expected_values(array), _round_trip(array))
