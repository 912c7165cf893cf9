"""NumPy Generator / BitGenerator, legacy RandomState and random.Random continue identical streams."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from opencheckpoint import Checkpoint, read_component
from opencheckpoint.adapters import numpy_rng
from opencheckpoint.adapters.base import resolve_adapter
from opencheckpoint.format.errors import IncompatibleComponent


@pytest.mark.parametrize("bit_generator", [np.random.PCG64, np.random.PCG64DXSM, np.random.MT19937,
                                           np.random.Philox, np.random.SFC64])
def test_generator_continues_identical_stream(tmp_path: Path, bit_generator: type) -> None:
    rng = np.random.Generator(bit_generator(12345))
    rng.random(7)
    rng.integers(0, 2**32, dtype=np.uint32)  # leaves a cached half word (has_uint32) in some generators
    path = Checkpoint(rng=rng).save(tmp_path / "c")
    expected = (rng.random(5), rng.normal(size=3), rng.integers(0, 1 << 40, size=4))
    other = np.random.Generator(bit_generator(0))
    Checkpoint(rng=other).load(path)
    got = (other.random(5), other.normal(size=3), other.integers(0, 1 << 40, size=4))
    for a, b in zip(expected, got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_pcg64_128_bit_state_is_stored_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(2**100 + 3)
    state = rng.bit_generator.state["state"]
    assert state["state"] >= 2**64 or state["inc"] >= 2**64  # the test needs a big int
    path = Checkpoint(rng=rng).save(tmp_path / "c")
    assert read_component(path, "rng")["state"] == state


def test_bit_generator_component(tmp_path: Path) -> None:
    bits = np.random.PCG64(5)
    bits.random_raw(3)
    path = Checkpoint(bits=bits).save(tmp_path / "c")
    expected = bits.random_raw(4)
    target = np.random.PCG64(0)
    Checkpoint(bits=target).load(path)
    np.testing.assert_array_equal(target.random_raw(4), expected)


def test_random_state_continues_with_cached_gaussian(tmp_path: Path) -> None:
    legacy = np.random.RandomState(42)
    legacy.standard_normal()  # leaves has_gauss=1 with a cached value
    assert legacy.get_state(legacy=False)["has_gauss"] == 1
    path = Checkpoint(legacy=legacy).save(tmp_path / "c")
    expected = (legacy.standard_normal(3), legacy.randint(0, 100, size=5))
    other = np.random.RandomState(0)
    Checkpoint(legacy=other).load(path)
    np.testing.assert_array_equal(other.standard_normal(3), expected[0])
    np.testing.assert_array_equal(other.randint(0, 100, size=5), expected[1])


def test_python_random_continues_with_gauss_next(tmp_path: Path) -> None:
    rng = random.Random(99)
    rng.gauss(0, 1)  # caches gauss_next
    path = Checkpoint(py=rng).save(tmp_path / "c")
    stored = read_component(path, "py")
    assert stored["internal"].dtype == np.uint32 and stored["gauss_next"] is not None
    expected = [rng.gauss(0, 1), rng.random(), rng.getrandbits(100)]
    other = random.Random(0)
    Checkpoint(py=other).load(path)
    assert [other.gauss(0, 1), other.random(), other.getrandbits(100)] == expected


def test_wrong_algorithm_is_incompatible_and_leaves_target_untouched(tmp_path: Path) -> None:
    path = Checkpoint(rng=np.random.default_rng(1)).save(tmp_path / "c")
    target = np.random.Generator(np.random.MT19937(3))
    before = target.bit_generator.state
    with pytest.raises(IncompatibleComponent, match="'PCG64' state does not fit a MT19937"):
        Checkpoint(rng=target).load(path)
    assert target.bit_generator.state["state"]["pos"] == before["state"]["pos"]
    np.testing.assert_array_equal(target.bit_generator.state["state"]["key"], before["state"]["key"])
    with pytest.raises(IncompatibleComponent, match=r"not a random\.Random state"):
        Checkpoint(rng=random.Random(0)).load(path)


def test_adapters_are_resolved_for_rng_types() -> None:
    assert isinstance(resolve_adapter(np.random.default_rng()), numpy_rng.GeneratorAdapter)
    assert isinstance(resolve_adapter(np.random.RandomState(0)), numpy_rng.RandomStateAdapter)
    assert isinstance(resolve_adapter(random.Random(0)), numpy_rng.PythonRandomAdapter)
    assert numpy_rng.adapter_for(random.SystemRandom()) is None
    state = numpy_rng.to_tree_value(np.random.default_rng(0))
    assert state["bit_generator"] == "PCG64"
