"""Dtype conversions on restore (opencheckpoint.read.casting): policies, the lossy report, NaN payloads and ±0."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opencheckpoint.read.casting import Caster, CastRefused, convert, is_lossy, is_widening

BF16 = np.dtype(ml_dtypes.bfloat16)


def _bits(array: np.ndarray) -> list[int]:
    return np.ascontiguousarray(array).view(f"<u{array.dtype.itemsize}").tolist()


def _f32(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint32).view(np.float32)


@pytest.mark.parametrize(("stored", "target", "widening"), [
    ("bfloat16", "float32", True), ("float16", "float32", True), ("float32", "float64", True),
    ("bfloat16", "float64", True), ("int8", "int16", True), ("uint8", "int16", True), ("uint16", "uint32", True),
    ("int8", "float16", True), ("int16", "float32", True), ("int32", "float64", True),
    ("float32", "bfloat16", False), ("float16", "bfloat16", False), ("bfloat16", "float16", False),
    ("int16", "uint16", False), ("uint16", "int16", False), ("int32", "float32", False), ("int64", "float64", False),
])
def test_widening_is_decided_by_the_dtypes(stored: str, target: str, widening: bool) -> None:
    assert is_widening(stored, target) is widening


def test_bf16_to_fp32_and_back_keeps_every_bit_including_nan_payloads_and_signed_zero() -> None:
    # +0, -0, 1.5, a NaN with a payload, a negative NaN, a signaling-style NaN, -inf
    stored = np.array([0x0000, 0x8000, 0x3FC0, 0x7FC5, 0xFFC1, 0x7F81, 0xFF80], np.uint16).view(BF16)
    wide = convert(stored, np.dtype(np.float32))
    assert _bits(wide) == [b << 16 for b in _bits(stored)]  # bf16 is the top half of fp32, payload included
    assert not is_lossy(stored, wide)
    assert _bits(convert(wide, BF16)) == _bits(stored)


def test_fp32_to_bf16_rounds_and_reports_lossy_only_when_bits_are_lost() -> None:
    exact = _f32(0x3FC00000, 0x80000000, 0x7FC50000)  # 1.5, -0.0, NaN whose payload fits bf16
    narrow = convert(exact, BF16)
    assert _bits(narrow) == [0x3FC0, 0x8000, 0x7FC5] and not is_lossy(exact, narrow)
    inexact = _f32(0x3F800001)  # 1 + 2**-23 rounds to 1.0
    assert _bits(convert(inexact, BF16)) == [0x3F80] and is_lossy(inexact, convert(inexact, BF16))
    lost_payload = _f32(0x7F800001)  # a NaN whose payload lies in the dropped bits stays a NaN, reported lossy
    narrowed = convert(lost_payload, BF16)
    assert np.isnan(narrowed.astype(np.float32)).all() and is_lossy(lost_payload, narrowed)


@pytest.mark.parametrize("target", [np.float16, np.float64])
def test_fp32_nan_payloads_and_zero_signs_move_to_fp16_and_fp64(target: type) -> None:
    stored = _f32(0x7FC02000, 0xFFC02000, 0x80000000, 0x00000000)
    out = convert(stored, np.dtype(target))
    assert np.isnan(out[:2]).all() and np.signbit(out[1]) and not np.signbit(out[0])
    assert np.signbit(out[2]) and not np.signbit(out[3]) and (out[2:] == 0).all()
    assert not is_lossy(stored, out)  # 0x2000 survives fp16's 10 mantissa bits (shifted by 13)


def test_integer_widening_is_exact_and_narrowing_overflow_is_lossy() -> None:
    stored = np.array([-128, 0, 127], np.int8)
    assert convert(stored, np.dtype(np.int32)).tolist() == [-128, 0, 127]
    big = np.array([1, 2**20], np.int64)
    assert is_lossy(big, convert(big, np.dtype(np.int16)))
    assert not is_lossy(np.array([1, -2], np.int64), convert(np.array([1, -2], np.int64), np.dtype(np.int16)))


def test_policies_allow_refuse_and_report() -> None:
    values = np.array([1.0, 1 + 2**-20], np.float32)
    with pytest.raises(CastRefused, match="conversion is off"):
        Caster(None).cast(values, BF16, "w", "m")
    with pytest.raises(CastRefused, match="cast='widening' refuses"):
        Caster("widening").cast(values, BF16, "w", "m")
    with pytest.raises(CastRefused, match="cast='lossless' refuses"):
        Caster("lossless").cast(values, BF16, "w", "m")
    lossless = Caster("lossless")
    lossless.cast(values[:1], BF16, "w", "m")  # 1.0 is a bf16 value: allowed
    assert lossless.conversions[0].lossy is False
    anything = Caster(True)
    anything.cast(values, BF16, "w", "m")
    assert [(c.path, c.stored, c.target, c.lossy) for c in anything.conversions] == [("w", "float32", "bfloat16", True)]
    with pytest.raises(CastRefused, match="never converted"):
        Caster(True).cast(values, np.dtype(np.int32), "w", "m")  # float -> int truncates: never
    with pytest.raises(ValueError, match="cast must be"):
        Caster("sometimes")  # type: ignore[arg-type]
