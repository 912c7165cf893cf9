"""JAX arrays, typed PRNG keys and dtypes: jax -> file -> jax with identical bits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters import jax as jax_adapter  # noqa: E402
from opencheckpoint.format.dtypes import DTYPES, numpy_dtype  # noqa: E402
from opencheckpoint.format.errors import IncompatibleComponent, UnsupportedValue  # noqa: E402
from opencheckpoint.tree.nodes import DtypeValue, PRNGKeyValue  # noqa: E402

pytestmark = pytest.mark.jax

X64 = {"int64", "uint64", "float64", "complex128"}


def _bits(name: str, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    """Arbitrary bit patterns of a dtype (NaN payloads, subnormals, everything), bools 0/1."""
    dtype = numpy_dtype(name)
    count = int(np.prod(shape)) * dtype.itemsize
    raw = np.random.default_rng(len(name)).integers(0, 256, size=count, dtype=np.uint8)
    if name == "bool":
        raw &= 1
    return raw.view(dtype).reshape(shape)


def _same_bits(a: object, b: np.ndarray) -> bool:
    host = np.asarray(a)
    return host.dtype == b.dtype and host.shape == b.shape and host.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_round_trips_with_identical_bits(tmp_path: Path, name: str) -> None:
    with jax.enable_x64(name in X64):
        source = _bits(name)
        array = jax.device_put(source)
        assert array.dtype == source.dtype  # the test itself must not go through a truncation
        scalar = jax.device_put(_bits(name, ()))
        path = Checkpoint(state={"a": array, "s": scalar}).save(tmp_path / "c")
        back = read_component(path, "state", framework="jax")
        assert isinstance(back["a"], jax.Array) and isinstance(back["s"], jax.Array)
        assert _same_bits(back["a"], source)
        assert back["s"].shape == () and _same_bits(back["s"], np.asarray(scalar))
        with open_checkpoint(path) as reader:
            assert reader.tree("state")["a"].dtype == name


@pytest.mark.parametrize("name", sorted(X64))
def test_64_bit_array_into_jax_without_x64_raises_instead_of_truncating(tmp_path: Path, name: str) -> None:
    path = Checkpoint(state={"a": _bits(name)}).save(tmp_path / "c")
    assert not jax.config.jax_enable_x64
    with pytest.raises(IncompatibleComponent, match="jax_enable_x64"):
        read_component(path, "state", framework="jax")
    assert _same_bits(read_component(path, "state")["a"], _bits(name))  # NumPy still gets the bits


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_typed_keys_restore_impl_and_stream(tmp_path: Path, impl: str) -> None:
    key = jax.random.key(7, impl=impl)
    batch = jax.random.split(key, 3)
    path = Checkpoint(keys={"one": key, "batch": batch}).save(tmp_path / "c")
    stored = read_component(path, "keys")
    assert isinstance(stored["one"], PRNGKeyValue) and stored["one"].impl == impl
    assert stored["one"].data.dtype == np.uint32
    back = read_component(path, "keys", framework="jax")
    for name, original in (("one", key), ("batch", batch)):
        restored = back[name]
        assert restored.dtype == original.dtype and restored.shape == original.shape
        assert jax_adapter.key_impl_name(restored.dtype) == impl
        np.testing.assert_array_equal(jax.random.key_data(restored), jax.random.key_data(original))
    np.testing.assert_array_equal(jax.random.normal(back["one"], (5,)), jax.random.normal(key, (5,)))
    np.testing.assert_array_equal(jax.random.bits(jax.random.split(back["one"])[1], (4,)),
                                  jax.random.bits(jax.random.split(key)[1], (4,)))


def test_single_key_component_restores_through_adapter(tmp_path: Path) -> None:
    key = jax.random.key(3, impl="rbg")
    path = Checkpoint(rng_key=key).save(tmp_path / "c")
    result = Checkpoint(rng_key=jax.random.key(0, impl="rbg")).load(path)
    np.testing.assert_array_equal(jax.random.uniform(result.values["rng_key"], (3,)),
                                  jax.random.uniform(key, (3,)))
    with pytest.raises(IncompatibleComponent, match="key<threefry2x32>"):
        Checkpoint(rng_key=jax.random.key(0)).load(path)


def test_raw_uint32_legacy_key_stays_plain_array(tmp_path: Path) -> None:
    legacy = jax.random.PRNGKey(5)
    assert legacy.dtype == jnp.uint32
    path = Checkpoint(state={"k": legacy}).save(tmp_path / "c")
    stored = read_component(path, "state")["k"]
    assert isinstance(stored, np.ndarray) and stored.dtype == np.uint32
    np.testing.assert_array_equal(stored, np.asarray(legacy))


def test_dtypes_as_values(tmp_path: Path) -> None:
    path = Checkpoint(state={"a": jnp.bfloat16, "b": jnp.dtype("float8_e4m3fn"), "c": jnp.int32}).save(tmp_path / "c")
    assert read_component(path, "state")["a"] == numpy_dtype("bfloat16")
    back = read_component(path, "state", framework="jax")
    assert back == {"a": jnp.dtype(jnp.bfloat16), "b": jnp.dtype("float8_e4m3fn"), "c": jnp.dtype(jnp.int32)}
    assert jax_adapter.to_tree_value(jnp.float16) == DtypeValue("float16")


def test_map_location_places_arrays_and_keys(tmp_path: Path) -> None:
    cpu = jax.devices("cpu")[0]
    path = Checkpoint(state={"a": jnp.ones(3), "k": jax.random.key(1)}).save(tmp_path / "c")
    sharding = jax.sharding.SingleDeviceSharding(cpu)
    for location in ("cpu", cpu, sharding):
        back = read_component(path, "state", framework="jax", map_location=location)
        assert back["a"].devices() == {cpu} and back["k"].devices() == {cpu}
    with pytest.raises(TypeError):
        read_component(path, "state", framework="jax", map_location=3.5)


def test_traced_and_abstract_values_are_refused() -> None:
    with pytest.raises(UnsupportedValue, match="abstract"):
        jax_adapter.to_tree_value(jax.ShapeDtypeStruct((2,), jnp.float32))

    def save_inside_jit(x: jax.Array) -> jax.Array:
        with pytest.raises(UnsupportedValue, match="traced"):
            jax_adapter.to_tree_value(x)
        return x

    jax.jit(save_inside_jit)(jnp.ones(2))
