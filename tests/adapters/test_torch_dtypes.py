"""Every torch dtype of the spec table round-trips with identical bits, in both container forms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.torch import TORCH_DTYPES, tensor_to_numpy, to_tree_value  # noqa: E402
from opencheckpoint.format.dtypes import DTYPES  # noqa: E402
from opencheckpoint.tree.nodes import DtypeValue  # noqa: E402

pytestmark = pytest.mark.torch

ALL_NAMES = sorted(TORCH_DTYPES)


def random_bits(name: str, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """A tensor of ``name`` whose bytes are random (NaN payloads, -0.0, subnormals included)."""
    dtype = TORCH_DTYPES[name]
    count = int(np.prod(shape)) if shape else 1
    rng = np.random.default_rng(seed)
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    if name == "bool":
        return torch.from_numpy(rng.integers(0, 2, count).astype(np.bool_)).reshape(shape)
    raw = rng.integers(0, 256, (count, dtype.itemsize), dtype=np.uint8)
    return torch.from_numpy(raw).view(dtype)[:, 0].reshape(shape)


def raw(tensor: torch.Tensor) -> bytes:
    return tensor_to_numpy(tensor.contiguous()).tobytes()


def test_table_covers_every_spec_dtype() -> None:
    assert set(TORCH_DTYPES) == set(DTYPES)


@pytest.mark.parametrize("form", ["directory", "archive"])
@pytest.mark.parametrize("name", ALL_NAMES)
def test_round_trip_identical_bits(tmp_path: Path, name: str, form: str) -> None:
    full = random_bits(name, (5, 6))
    values = {
        "plain": full,
        "zero_d": random_bits(name, (), seed=1),
        "transposed": full.t(),  # non-contiguous
        "strided": full[::2, 1::3],
        "empty": random_bits(name, (0, 3)),
        "dtype": TORCH_DTYPES[name],
    }
    path = Checkpoint(values=values, format=form).save(tmp_path / "ckpt")
    loaded = read_component(path, "values", framework="torch")
    for key, original in values.items():
        if key == "dtype":
            assert loaded[key] is original
            continue
        got = loaded[key]
        assert got.dtype == original.dtype, key
        assert got.shape == original.shape, key
        assert raw(got) == raw(original), key
        assert got.is_contiguous()


@pytest.mark.parametrize("name", ALL_NAMES)
def test_numpy_read_has_the_spec_dtype(tmp_path: Path, name: str) -> None:
    tensor = random_bits(name, (4,))
    path = Checkpoint(t=tensor).save(tmp_path / "ckpt")
    array = read_component(path, "t")
    assert array.dtype.name == ("bool" if name == "bool" else np.dtype(DTYPES[name][1]).name)
    assert array.tobytes() == raw(tensor)


def test_cpu_tensor_is_shared_not_copied() -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.uint64, torch.complex64):
        tensor = torch.zeros(3, dtype=dtype)
        assert tensor_to_numpy(tensor).ctypes.data == tensor.data_ptr()


def test_requires_grad_parameter_and_small_types() -> None:
    parameter = torch.nn.Parameter(torch.ones(2))
    assert np.array_equal(to_tree_value(parameter), np.ones(2, np.float32))
    assert to_tree_value(torch.Size([2, 3])) == (2, 3)
    assert to_tree_value(torch.device("cpu")) == "cpu"
    assert to_tree_value(torch.bfloat16) == DtypeValue("bfloat16")


def test_conjugate_and_negative_views_store_their_values(tmp_path: Path) -> None:
    z = torch.tensor([1 + 2j, -3 - 4j], dtype=torch.complex64)
    path = Checkpoint(v={"conj": z.conj(), "neg": torch._neg_view(z)}).save(tmp_path / "c")
    loaded = read_component(path, "v", framework="torch")
    assert torch.equal(loaded["conj"], z.conj().resolve_conj())
    assert torch.equal(loaded["neg"], -z)


def test_loaded_tensors_are_writable_and_independent(tmp_path: Path) -> None:
    path = Checkpoint(t={"a": torch.arange(4.0)}).save(tmp_path / "c")
    first = read_component(path, "t", framework="torch")["a"]
    first += 1  # would raise or corrupt the file if it were a view of the map
    assert torch.equal(read_component(path, "t", framework="torch")["a"], torch.arange(4.0))


def test_sparse_tensor_is_rejected_with_location(tmp_path: Path) -> None:
    from opencheckpoint import UnsupportedValue

    with pytest.raises(UnsupportedValue, match="sparse"):
        Checkpoint(t={"s": torch.eye(2).to_sparse()}).save(tmp_path / "c")


def test_lazy_tree_reports_torch_dtype_names(tmp_path: Path) -> None:
    path = Checkpoint(t={"b": torch.zeros(2, 3, dtype=torch.bfloat16)}).save(tmp_path / "c")
    with open_checkpoint(path) as reader:
        lazy = reader.tree("t")["b"]
        assert (lazy.dtype, lazy.shape) == ("bfloat16", (2, 3))


def test_bool_tensor_with_bytes_02_is_saved_as_true_stored_as_01(tmp_path: Path) -> None:
    """torch reads a bool byte 02 as True (as after torch.frombuffer or a foreign file); the save stores 01."""
    from opencheckpoint import validate

    memory = bytearray(b"\x02\x00\x03\x01")
    tensor = torch.frombuffer(memory, dtype=torch.bool)
    assert tensor.tolist() == [True, False, True, True]
    path = Checkpoint(t={"mask": tensor}, durable=False).save(tmp_path / "c")
    assert validate(path).ok
    loaded = read_component(path, "t", framework="torch")["mask"]
    assert loaded.dtype == torch.bool and loaded.tolist() == [True, False, True, True]
    assert loaded.view(torch.uint8).tolist() == [1, 0, 1, 1]
    assert memory == bytearray(b"\x02\x00\x03\x01")  # the live tensor's memory is left as it was
