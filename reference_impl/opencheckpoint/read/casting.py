"""Dtype conversions on restore, only when asked (``cast=``), each one reported (framework-neutral).

Policies (``cast=``):

* ``None`` / ``False`` (default): no conversion; a dtype mismatch stays an
  :class:`~opencheckpoint.format.errors.IncompatibleComponent` naming each array.
* ``"widening"``: only conversions that are exact for *every* value of the
  stored dtype (bfloat16/float16 -> float32 -> float64, int8 -> int16, ...).
* ``"lossless"``: any supported conversion whose actual values all survive
  it exactly (checked on the data: float32 weights that happen to be
  bfloat16 values may go to bfloat16); a lossy one is refused.
* ``True`` / ``"any"``: every supported conversion; the lossy ones are
  reported as lossy.

Supported: float <-> float (float16, bfloat16, float32, float64, float8),
integer <-> integer, integer -> float, complex <-> complex. float -> integer,
bool and complex <-> real are refused under every policy (they are never a
change of precision). Values round to nearest even; ±0 keep their sign; NaN
sign and payload bits are kept where the target can hold them (a payload
shifted out of a narrower target makes the conversion lossy). A conversion
is *lossy* when converting the result back does not give the stored bits.

>>> import numpy as np
>>> caster = Caster("widening")
>>> caster.cast(np.array([1.5, -0.0], np.float16), np.dtype(np.float32), "w", "model").tolist()
[1.5, -0.0]
>>> caster.conversions[0].lossy
False
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..format.dtypes import dtype_name, numpy_dtype

CastPolicy = bool | Literal["any", "widening", "lossless"] | None
_POLICIES = ("any", "widening", "lossless")

#: IEEE-style binary float formats: name -> (exponent bits, mantissa bits); NaN payloads are moved bitwise.
_FLOATS: dict[str, tuple[int, int]] = {
    "float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52),
}


@dataclass(frozen=True)
class Conversion:
    """One array converted on restore."""

    component: str
    path: str
    stored: str
    target: str
    lossy: bool


class CastRefused(Exception):
    """A conversion the policy does not allow (the adapter reports it as a mismatch)."""


def _family(name: str) -> str:
    if name == "bool":
        return "bool"
    if name.startswith("complex"):
        return "complex"
    if name.startswith(("float", "bfloat")):
        return "float"
    return "int"


def is_widening(stored: str, target: str) -> bool:
    """Whether every value of ``stored`` converts to ``target`` exactly (by the dtypes alone).

    >>> is_widening("bfloat16", "float32"), is_widening("float16", "bfloat16"), is_widening("int8", "float16")
    (True, False, True)
    """
    src, dst = np.dtype(numpy_dtype(stored)), np.dtype(numpy_dtype(target))
    kinds = _family(stored), _family(target)
    if kinds == ("float", "float"):
        if stored not in _FLOATS or target not in _FLOATS:
            return stored == target
        (se, sm), (te, tm) = _FLOATS[stored], _FLOATS[target]
        return te >= se and tm >= sm
    if kinds == ("complex", "complex"):
        return dst.itemsize >= src.itemsize
    if kinds == ("int", "int"):
        s_signed, t_signed = src.kind == "i", dst.kind == "i"
        if s_signed and not t_signed:
            return False
        return dst.itemsize > src.itemsize or (dst.itemsize == src.itemsize and s_signed == t_signed)
    if kinds == ("int", "float") and target in _FLOATS:
        magnitude = src.itemsize * 8 - (1 if src.kind == "i" else 0)
        return magnitude <= _FLOATS[target][1] + 1
    return False


def _supported(stored: str, target: str) -> bool:
    kinds = _family(stored), _family(target)
    return kinds in (("float", "float"), ("int", "int"), ("int", "float"), ("complex", "complex"))


def _bits(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"<u{dtype.itemsize}")


def convert(array: np.ndarray, target: np.dtype) -> np.ndarray:
    """``array`` as ``target`` (round to nearest even), keeping NaN sign and payload bits where they fit."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf / wrap-around: the round trip reports it
        out = np.asarray(array).astype(target)
        source_name, target_name = dtype_name(array.dtype), dtype_name(target)
        floats = source_name in _FLOATS and target_name in _FLOATS and out.size
        nan = np.isnan(array) if floats else None  # signaling NaNs make isnan warn "invalid value"
    if nan is not None and nan.any():
        out = np.array(out)  # writable
        out.view(_bits(out.dtype))[nan] = _nan_bits(array.view(_bits(array.dtype))[nan], source_name,
                                                    target_name, out.dtype)
    return out


def _nan_bits(bits: np.ndarray, source: str, target: str, target_dtype: np.dtype) -> np.ndarray:
    """Target bit patterns for NaNs: same sign, payload shifted to the target's mantissa width."""
    (_, sm), (te, tm) = _FLOATS[source], _FLOATS[target]
    width_s, width_t = sm + _FLOATS[source][0] + 1, tm + te + 1
    wide = bits.astype(np.uint64)
    sign = wide >> np.uint64(width_s - 1)
    payload = wide & np.uint64((1 << sm) - 1)
    payload = payload << np.uint64(tm - sm) if tm >= sm else payload >> np.uint64(sm - tm)
    payload = np.where(payload == 0, np.uint64(1 << (tm - 1)), payload)  # still a NaN: the quiet bit
    exponent = np.uint64(((1 << te) - 1) << tm)
    result = (sign << np.uint64(width_t - 1)) | exponent | payload
    return result.astype(_bits(target_dtype))


def is_lossy(array: np.ndarray, converted: np.ndarray) -> bool:
    """True when converting back does not give the stored bits (values, ±0, NaN payloads)."""
    if array.size == 0:
        return False
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        back = convert(converted, array.dtype)
    return not np.array_equal(np.ascontiguousarray(back).view(_bits(back.dtype)),
                              np.ascontiguousarray(array).view(_bits(array.dtype)))


@dataclass
class Caster:
    """Applies a cast policy and records every conversion made (``conversions``)."""

    policy: CastPolicy = None
    conversions: list[Conversion] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy is True:
            self.policy = "any"
        elif self.policy is False:
            self.policy = None
        if self.policy is not None and self.policy not in _POLICIES:
            raise ValueError(f"cast must be True, False, None or one of {_POLICIES}, got {self.policy!r}")

    @property
    def enabled(self) -> bool:
        return self.policy is not None

    def refusal(self, stored: str, target: str) -> str | None:
        """Why ``stored`` -> ``target`` is not allowed (None when it is, pending the data for "lossless")."""
        if self.policy is None:
            return "dtype conversion is off (pass cast=True or cast='widening' to convert)"
        if not _supported(stored, target):
            return f"{stored} -> {target} is not a change of precision; it is never converted"
        if self.policy == "widening" and not is_widening(stored, target):
            return f"{stored} -> {target} can lose information; cast='widening' refuses it"
        return None

    def cast(self, array: Any, target: np.dtype, path: str, component: str) -> np.ndarray:
        """``array`` converted to ``target`` and recorded; :class:`CastRefused` when the policy forbids it."""
        array = np.asarray(array)
        stored_name, target_name = dtype_name(array.dtype), dtype_name(np.dtype(target))
        reason = self.refusal(stored_name, target_name)
        if reason is not None:
            raise CastRefused(reason)
        out = convert(array, np.dtype(target))
        lossy = False if is_widening(stored_name, target_name) else is_lossy(array, out)
        if lossy and self.policy == "lossless":
            raise CastRefused(f"{stored_name} -> {target_name} would change values; cast='lossless' refuses it "
                              "(cast=True converts and reports it as lossy)")
        self.conversions.append(Conversion(component, path, stored_name, target_name, lossy))
        return out


__all__ = ["CastPolicy", "CastRefused", "Caster", "Conversion", "convert", "is_lossy", "is_widening"]
