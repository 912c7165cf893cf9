"""The tensor-kinds matrix: every kind of array a framework exposes, stored exactly or refused at save.

Each :class:`Kind` row builds one value (a torch tensor, a JAX array, a NumPy
array, or a small list of them) and says what a save must do with it: store it
so that it reads back equal, element by element and bit for bit, to what the
framework itself says its values are (:func:`expected_values`:
``t.detach().cpu().clone()`` with conjugate and negative bits resolved,
``np.asarray`` of a JAX array, a copy of a NumPy array), or refuse it with a
:class:`~opencheckpoint.format.errors.CheckpointError` before anything is written. No
row may produce a checkpoint whose values differ from the value's
(docs/guarantees.md, "What is stored exactly, what is refused").

:func:`check_kind` runs one row through any save function; the adapter test kit
(:class:`~.adapter_tests.AdapterTests`) runs every row through a third-party
adapter. Rows of a framework that is not installed are skipped by the caller.
Kinds that need several processes (DTensors over a mesh of several ranks,
``fully_shard``, arrays not fully addressable) are in the project's own
multi-process tests.

>>> sorted({kind.framework for kind in KINDS})
['jax', 'numpy', 'torch']
>>> next(k for k in KINDS if k.name == "torch-meta").stored
False
"""

from __future__ import annotations

import mmap
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["KINDS", "ExpectedArray", "Kind", "assert_same_values", "check_kind", "expected_values"]


@dataclass(frozen=True)
class Kind:
    """One row of the matrix: a value of ``framework`` built by ``build``, stored exactly or refused."""

    name: str
    framework: str
    build: Callable[[], Any]
    stored: bool
    why: str = ""


@dataclass(frozen=True)
class ExpectedArray:
    """What an array must read back as: its dtype name, shape and C-order bytes."""

    dtype: str
    shape: tuple[int, ...]
    bits: bytes


def expected_values(value: Any) -> Any:
    """The values the framework says ``value`` holds (a list of them for a list), taken without this library."""
    if isinstance(value, (list, tuple)):
        return [expected_values(item) for item in value]
    if type(value).__module__.startswith("torch"):
        torch = _torch()
        values = value.detach().cpu().clone().resolve_conj().resolve_neg()
        plain = torch.empty(values.shape, dtype=values.dtype).copy_(values)  # fresh C-order strides, even size-1 dims
        bits = plain.reshape(-1).view(torch.uint8).numpy().tobytes() if plain.numel() else b""
        return ExpectedArray(str(plain.dtype).removeprefix("torch."), tuple(plain.shape), bits)
    array = np.array(np.asarray(value), copy=True, order="C")
    if array.dtype == np.bool_:
        array = array != 0  # any nonzero byte is True: stored as 01 (spec R-ARR-13)
    return ExpectedArray(str(array.dtype), tuple(array.shape), array.tobytes())


def assert_same_values(expected: Any, stored: Any, where: str = "$") -> None:
    """Raise ``AssertionError`` unless ``stored`` (read back as NumPy) holds exactly ``expected``."""
    if isinstance(expected, list):
        assert isinstance(stored, (list, tuple)) and len(stored) == len(expected), f"{where}: {stored!r}"
        for index, (item, back) in enumerate(zip(expected, stored, strict=True)):
            assert_same_values(item, back, f"{where}[{index}]")
        return
    assert isinstance(stored, np.ndarray), f"{where}: read back a {type(stored).__name__}, not an array"
    assert str(stored.dtype) == expected.dtype, f"{where}: dtype {stored.dtype} != {expected.dtype}"
    assert tuple(stored.shape) == expected.shape, f"{where}: shape {stored.shape} != {expected.shape}"
    assert np.ascontiguousarray(stored).tobytes() == expected.bits, f"{where}: the values differ"


def check_kind(kind: Kind, directory: Path, save: Callable[[Any, Path], Any], read: Callable[[Any], Any]) -> None:
    """Save ``kind``'s value with ``save(value, directory / name)``: read back (``read(path)``) exactly, or
    refused with a ``CheckpointError`` leaving ``directory`` as empty as it was."""
    import pytest

    from ..format.errors import CheckpointError

    value = kind.build()
    target = Path(directory) / kind.name
    before = sorted(os.listdir(directory))
    if kind.stored:
        expected = expected_values(value)
        path = save(value, target)
        assert_same_values(expected, read(path), f"{kind.name}")
        return
    with pytest.raises(CheckpointError):
        save(value, target)
    assert sorted(os.listdir(directory)) == before, f"{kind.name}: a refused save left {os.listdir(directory)}"


def _quiet(build: Callable[[], Any]) -> Callable[[], Any]:
    """``build`` without the warnings frameworks give for beta or deprecated kinds (sparse CSR, quantized)."""

    def quiet() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            warnings.simplefilter("ignore", PendingDeprecationWarning)
            return build()

    return quiet


# -- torch ---------------------------------------------------------------------------------------------
def _torch() -> Any:
    import torch

    return torch


def _seeded(shape: tuple[int, ...] = (3, 4), dtype: str = "float32") -> Any:
    torch = _torch()
    generator = torch.Generator().manual_seed(7)
    return torch.randn(shape, generator=generator).to(getattr(torch, dtype))


def _inference() -> Any:
    torch = _torch()
    with torch.inference_mode():
        return _seeded() * 2


def _under_mode(mode_path: str) -> Any:
    module, _, name = mode_path.rpartition(".")
    mode = getattr(__import__(module, fromlist=[name]), name)
    with mode():
        return _torch().ones(3)


def _data_replaced_by_functional() -> Any:
    plain = _torch().zeros(3)
    plain.data = _under_mode("torch._subclasses.functional_tensor.FunctionalTensorMode")
    return plain


def _parameter_data_replaced_by_fake() -> Any:
    torch = _torch()
    parameter = torch.nn.Parameter(torch.zeros(3))
    parameter.data = _under_mode("torch._subclasses.fake_tensor.FakeTensorMode")
    return parameter


def _captured(transform: str) -> Any:
    """A tensor of ``torch.func``'s transform, kept after the transform returned."""
    torch = _torch()
    seen: list[Any] = []

    def keep(tensor: Any) -> Any:
        seen.append(tensor)
        return tensor if transform == "vmap" else tensor.sum()

    (torch.func.vmap if transform == "vmap" else torch.func.grad)(keep)(torch.ones(2, 3))
    return seen[0]


def _freed() -> Any:
    tensor = _seeded((4,))
    tensor.untyped_storage().resize_(0)
    return tensor


def _subclass() -> Any:
    torch = _torch()
    kind = type("UserTensor", (torch.Tensor,), {})
    return _seeded().as_subclass(kind)


def _overlapping_views() -> Any:
    base = _torch().arange(10, dtype=_torch().float32)
    return [base[0:6], base[3:9], base]  # three views of one storage, overlapping


def _torch_kinds() -> list[Kind]:
    t = _torch
    stored = [
        ("float32", lambda: _seeded()), ("parameter", lambda: t().nn.Parameter(_seeded())),
        ("requires-grad", lambda: _seeded().requires_grad_() * 3), ("inference", _inference),
        ("bfloat16", lambda: _seeded(dtype="bfloat16")), ("float8", lambda: _seeded(dtype="float8_e4m3fn")),
        ("complex64", lambda: t().complex(_seeded(), -_seeded())), ("int64-0d", lambda: t().tensor(-5)),
        ("bool", lambda: _seeded() > 0), ("empty", lambda: t().empty(0, 3)),
        ("transposed", lambda: _seeded().t()), ("storage-offset", lambda: t().arange(20.0)[5:15:2]),
        ("expanded", lambda: _seeded((3, 1)).expand(3, 4)),
        ("zero-stride", lambda: t().ones(1).as_strided((4, 2), (0, 0))),
        ("as-strided-overlap", lambda: t().arange(10.0).as_strided((3, 3), (1, 1), 1)),
        ("channels-last", lambda: _seeded((1, 2, 3, 3)).to(memory_format=t().channels_last)),
        ("conj-view", lambda: t().complex(_seeded(), _seeded()).conj()),
        ("neg-view", lambda: t().complex(_seeded(), _seeded()).conj().imag),
        ("dtype-view", lambda: _seeded().view(t().int32)), ("shared-memory", lambda: _seeded().share_memory_()),
        ("from-numpy", lambda: t().from_numpy(np.arange(6, dtype=np.int16).reshape(2, 3)[:, ::2])),
        ("shared-storage", _overlapping_views),
    ]
    refused = [
        ("meta", lambda: t().empty(3, device="meta"), "no data"),
        ("fake", lambda: _under_mode("torch._subclasses.fake_tensor.FakeTensorMode"), "FakeTensor"),
        ("functional", lambda: _under_mode("torch._subclasses.functional_tensor.FunctionalTensorMode"),
         "FunctionalTensor"),
        ("data-set-to-functional", _data_replaced_by_functional, "storage without data"),
        ("parameter-data-set-to-fake", _parameter_data_replaced_by_fake, "meta device"),
        ("zerotensor", lambda: t()._efficientzerotensor(3), "ZeroTensor"),
        ("sparse-coo", lambda: _seeded().to_sparse(), "sparse layout"),
        ("sparse-csr", lambda: _seeded().to_sparse_csr(), "sparse layout"),
        ("nested", lambda: t().nested.nested_tensor([t().ones(2), t().ones(3)]), "nested"),
        ("nested-jagged", lambda: t().nested.nested_tensor([t().ones(2), t().ones(3)], layout=t().jagged),
         "NestedTensor subclass"),
        ("quantized", lambda: t().quantize_per_tensor(_seeded(), 0.1, 0, t().qint8), "quantized"),
        ("mkldnn", lambda: _seeded().to_mkldnn(), "opaque layout"),
        ("vmap-batched", lambda: _captured("vmap"), "torch.func"), ("grad-wrapped", lambda: _captured("grad"),
                                                                    "torch.func"),
        ("freed-storage", _freed, "storage resized to 0"), ("subclass", _subclass, "a user subclass"),
        ("complex32", lambda: t().ones(2, dtype=t().complex32), "no spec dtype"),
    ]
    return ([Kind(f"torch-{name}", "torch", _quiet(build), True) for name, build in stored]
            + [Kind(f"torch-{name}", "torch", _quiet(build), False, why) for name, build, why in refused])


# -- JAX -----------------------------------------------------------------------------------------------
def _jnp() -> Any:
    import jax.numpy as jnp

    return jnp


def _jax_tracer() -> Any:
    import jax

    seen: list[Any] = []

    def keep(array: Any) -> Any:
        seen.append(array)
        return array

    jax.jit(keep)(_jnp().ones(3))
    return seen[0]


def _jax_deleted() -> Any:
    array = _jnp().arange(4.0)
    array.delete()
    return array


def _jax_float0() -> Any:
    import jax

    return jax.grad(lambda x, n: x * 1.0, argnums=1, allow_int=True)(1.0, 3)


def _jax_sharded() -> Any:
    """An array split over every local device (one block each when there is one device)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    count = len(jax.devices())
    full = np.arange(count * 6, dtype=np.float32).reshape(count * 2, 3)
    sharding = NamedSharding(jax.make_mesh((count,), ("x",)), PartitionSpec("x"))  # type: ignore[no-untyped-call]
    return jax.make_array_from_callback(full.shape, sharding, lambda index: full[index])


def _jax_kinds() -> list[Kind]:
    j = _jnp
    stored = [("float32", lambda: j().arange(12.0, dtype=j().float32).reshape(3, 4)),
              ("bfloat16", lambda: j().linspace(-2, 2, 7, dtype=j().bfloat16)),
              ("int8-0d", lambda: j().int8(-7)), ("empty", lambda: j().zeros((0, 2))),
              ("strided-slice", lambda: j().arange(10)[::-2]), ("bool", lambda: j().arange(5) > 2),
              ("sharded-local-devices", _jax_sharded)]
    refused = [("tracer", _jax_tracer, "traced"), ("deleted", _jax_deleted, "deleted / donated"),
               ("shape-dtype-struct", lambda: __import__("jax").ShapeDtypeStruct((2,), j().float32), "abstract"),
               ("float0", _jax_float0, "no spec dtype")]
    return ([Kind(f"jax-{name}", "jax", build, True) for name, build in stored]
            + [Kind(f"jax-{name}", "jax", build, False, why) for name, build, why in refused])


# -- NumPy ---------------------------------------------------------------------------------------------
def _memmap(truncate: bool) -> np.memmap:
    handle, name = tempfile.mkstemp(suffix=".bin")
    os.close(handle)
    array = np.memmap(name, dtype=np.float32, mode="w+", shape=(2 * mmap.PAGESIZE,))
    array[:] = np.arange(array.size, dtype=np.float32)
    array.flush()  # the file object np.memmap opened is closed already; the mapping stays
    if truncate:
        os.truncate(name, 16)
    os.unlink(name)
    return array


def _numpy_kinds() -> list[Kind]:
    grid = np.arange(24, dtype=np.float64).reshape(4, 6)
    stored = [("float64", lambda: grid.copy()), ("float16-0d", lambda: np.array(1.5, np.float16)),
              ("bool-raw-bytes", lambda: np.frombuffer(b"\x00\x02\xff\x01", dtype=np.bool_)),
              ("non-contiguous", lambda: grid[:, ::2]), ("negative-strides", lambda: grid[::-1, ::-3]),
              ("zero-stride", lambda: np.broadcast_to(np.arange(3.0), (4, 3))),
              ("fortran", lambda: np.asfortranarray(grid)), ("empty", lambda: np.zeros((0, 5), np.int32)),
              ("unaligned", lambda: np.frombuffer(b"\x00" + np.arange(3, dtype="<i4").tobytes(), "<i4", offset=1)),
              ("read-only", lambda: np.frombuffer(np.arange(4, dtype=np.int8).tobytes(), np.int8)),
              ("memmap", lambda: _memmap(False))]
    refused = [("object", lambda: np.array([1, "a"], dtype=object), "object dtype"),
               ("structured", lambda: np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]), "structured dtype"),
               ("unicode", lambda: np.array(["ab"]), "string dtype"),
               ("variable-width-string", lambda: np.array(["a", "bb"], dtype=np.dtypes.StringDType()),
                "new-style dtype without a byte order (was a raw TypeError)"),
               ("byte-swapped", lambda: np.arange(3, dtype=">f4"), "big-endian"),
               ("memmap-truncated", lambda: _memmap(True), "file truncated after mapping"),
               ("masked", lambda: np.ma.masked_array([1.0, 2.0], mask=[False, True]), "mask would be lost"),
               ("matrix", lambda: np.asmatrix(grid), "type would be lost")]
    return ([Kind(f"numpy-{name}", "numpy", build, True) for name, build in stored]
            + [Kind(f"numpy-{name}", "numpy", _quiet(build), False, why) for name, build, why in refused])


#: Every row, torch first; builders import their framework only when called.
KINDS: tuple[Kind, ...] = (*_torch_kinds(), *_jax_kinds(), *_numpy_kinds())
