"""Sharded ``jax.Array``s: saved shard by shard on an 8-device CPU mesh, restored onto other meshes and shardings.

The 8 host CPU devices come from ``conftest.py`` (``XLA_FLAGS``, set before JAX starts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters import jax_sharding  # noqa: E402
from opencheckpoint.format.errors import IntegrityError  # noqa: E402

pytestmark = [
    pytest.mark.jax,
    pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 JAX devices (conftest.py sets XLA_FLAGS "
                                                      "before JAX starts; JAX was started elsewhere first)"),
]


def mesh(shape: tuple[int, int]) -> Any:
    return jax.make_mesh(shape, ("x", "y"))


def placed(host: np.ndarray, spec: Any, shape: tuple[int, int] = (4, 2)) -> Any:
    return jax.device_put(host, NamedSharding(mesh(shape), spec))


def host(shape: tuple[int, ...] = (8, 4), dtype: Any = np.float32) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)


def manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / "manifest.json").read_text())


def regions(path: Path, component: str, key: str) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    with open_checkpoint(path) as ckpt:
        handle = ckpt.tree(component)[key]
        return [(tuple(s.start), tuple(s.size)) for s in handle.ref.shards]


def test_sharded_array_is_saved_shard_by_shard_as_format_version_2(tmp_path: Path) -> None:
    array = placed(host(), P("x", "y"))
    path = Checkpoint(state={"w": array}).save(tmp_path / "c")
    assert manifest(path)["format_version"] == 2
    stored = regions(path, "state", "w")
    assert sorted(stored) == sorted(jax_sharding.index_region(s.index, (8, 4)) for s in array.addressable_shards)
    np.testing.assert_array_equal(read_component(path, "state")["w"], host())


def test_replicated_and_single_device_arrays_stay_format_version_1(tmp_path: Path) -> None:
    tree = {"replicated": placed(host(), P()), "one_device": jnp.arange(4.0), "scalar": jnp.float32(2)}
    path = Checkpoint(state=tree).save(tmp_path / "c")
    assert manifest(path)["format_version"] == 1
    assert not list(path.rglob("rank-*.bin"))


def test_partially_replicated_array_stores_each_region_once(tmp_path: Path) -> None:
    array = placed(host(), P("x", None))  # 8 devices, 4 distinct row blocks, each on 2 devices
    path = Checkpoint(state={"w": array}).save(tmp_path / "c")
    stored = regions(path, "state", "w")
    assert len(stored) == 4 and len(set(stored)) == 4
    np.testing.assert_array_equal(read_component(path, "state")["w"], host())


@pytest.mark.parametrize(("shape", "spec"), [((2, 4), P("x", "y")), ((4, 2), P(None, "x")), ((2, 4), P("y"))],
                         ids=["2x4", "P(None,x)", "P(y)"])
def test_restore_onto_another_mesh_and_sharding(tmp_path: Path, shape: tuple[int, int], spec: Any) -> None:
    path = Checkpoint(state={"w": placed(host(), P("x", "y"))}).save(tmp_path / "c")
    sharding = NamedSharding(mesh(shape), spec)
    target = {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=sharding)}
    restored = Checkpoint(state=target).load(path).values["state"]["w"]
    assert restored.sharding == sharding
    np.testing.assert_array_equal(np.asarray(restored), host())
    for shard in restored.addressable_shards:  # every device holds exactly its block
        np.testing.assert_array_equal(np.asarray(shard.data), host()[shard.index])


def test_restore_into_live_sharded_array_and_onto_one_device(tmp_path: Path) -> None:
    path = Checkpoint(state={"w": placed(host(), P("x", "y"))}).save(tmp_path / "c")
    live = {"w": placed(np.zeros((8, 4), np.float32), P("y", "x"), (2, 4))}
    restored = Checkpoint(state=live).load(path).values["state"]["w"]
    assert restored.sharding == live["w"].sharding
    np.testing.assert_array_equal(np.asarray(restored), host())
    single = Checkpoint(state={"w": jnp.zeros((8, 4), jnp.float32)}).load(path).values["state"]["w"]
    assert len(single.sharding.device_set) == 1
    np.testing.assert_array_equal(np.asarray(single), host())


def test_each_device_reads_only_its_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = Checkpoint(state={"w": placed(host((8, 8)), P("x", "y"))}).save(tmp_path / "c")
    asked: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = jax_sharding.assemble

    class Spy:  # the stored handle, noting each region asked of it
        def __init__(self, handle: Any) -> None:
            self.handle, self.shape = handle, handle.shape

        def read_region(self, start: Any, size: Any, *, verify: bool = True) -> np.ndarray:
            asked.append((tuple(start), tuple(size)))
            return np.asarray(self.handle.read_region(start, size, verify=verify))

    def spying(handle: Any, sharding: Any, *, verify: bool = True) -> Any:
        return real(Spy(handle), sharding, verify=verify)

    monkeypatch.setattr(jax_sharding, "assemble", spying)
    sharding = NamedSharding(mesh((2, 4)), P(None, "x"))  # 2 column blocks, each on 4 devices
    target = {"w": jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=sharding)}
    restored = Checkpoint(state=target).load(path).values["state"]["w"]
    assert sorted(asked) == [((0, 0), (8, 4)), ((0, 4), (8, 4))]  # each block once, never the whole array
    np.testing.assert_array_equal(np.asarray(restored), host((8, 8)))


def test_a_corrupt_shard_fails_the_sharded_restore(tmp_path: Path) -> None:
    path = Checkpoint(state={"w": placed(host(), P("x", "y"))}).save(tmp_path / "c")
    rank_file = next(path.rglob("rank-*.bin"))
    data = bytearray(rank_file.read_bytes())
    data[0] ^= 0xFF  # the first shard's first byte
    rank_file.write_bytes(bytes(data))
    target = {"w": jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(mesh((2, 4)), P("x", "y")))}
    with pytest.raises(IntegrityError):
        Checkpoint(state=target).load(path)


def test_nnx_model_and_optax_state_restore_onto_another_mesh(tmp_path: Path) -> None:
    import optax
    from flax import nnx

    def build(seed: int) -> Any:
        return nnx.Linear(8, 16, rngs=nnx.Rngs(seed))

    def shard(state: Any, layout: Any, spec: Any) -> Any:
        return jax.tree_util.tree_map(
            lambda x: jax.device_put(x, NamedSharding(layout, spec if x.ndim == 2 else P())), state)

    model = build(0)
    nnx.update(model, shard(nnx.state(model), mesh((4, 2)), P("x", "y")))
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)
    grads = jax.tree_util.tree_map(jnp.ones_like, nnx.state(model, nnx.Param))
    optimizer.update(model, grads)  # moments become non-zero, laid out like the parameters
    path = Checkpoint(model=model, optim=optimizer).save(tmp_path / "c")
    assert manifest(path)["format_version"] == 2

    other = mesh((2, 4))
    fresh = build(1)
    nnx.update(fresh, shard(nnx.state(fresh), other, P("y", "x")))
    fresh_optimizer = nnx.Optimizer(fresh, optax.adam(1e-2), wrt=nnx.Param)
    Checkpoint(model=fresh, optim=fresh_optimizer).load(path)
    assert fresh.kernel.get_value().sharding == NamedSharding(other, P("y", "x"))
    np.testing.assert_array_equal(np.asarray(fresh.kernel.get_value()), np.asarray(model.kernel.get_value()))
    saved_mu, restored_mu = (jax.tree_util.tree_leaves(nnx.state(o)) for o in (optimizer, fresh_optimizer))
    for a, b in zip(saved_mu, restored_mu, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_restore_nnx_abstract_state_with_shardings(tmp_path: Path) -> None:
    from flax import nnx

    from opencheckpoint.adapters.jax import restore_nnx

    model = nnx.Linear(8, 16, rngs=nnx.Rngs(0))
    nnx.update(model, jax.tree_util.tree_map(
        lambda x: jax.device_put(x, NamedSharding(mesh((4, 2)), P("x", "y") if x.ndim == 2 else P())),
        nnx.state(model)))
    path = Checkpoint(model=model).save(tmp_path / "c")
    abstract = nnx.eval_shape(lambda: nnx.Linear(8, 16, rngs=nnx.Rngs(1)))
    graphdef, state = nnx.split(abstract)
    sharding = NamedSharding(mesh((2, 4)), P(None, "x"))
    state = jax.tree_util.tree_map(
        lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding if len(s.shape) == 2 else None), state)
    restored = restore_nnx(path, "model", (graphdef, state))
    assert restored.kernel.get_value().sharding == sharding
    np.testing.assert_array_equal(np.asarray(restored.kernel.get_value()), np.asarray(model.kernel.get_value()))
    np.testing.assert_array_equal(np.asarray(restored.bias.get_value()), np.asarray(model.bias.get_value()))


def test_device_blocks_become_regions_and_a_strided_block_is_refused() -> None:
    from opencheckpoint.format.errors import UnsupportedValue

    assert jax_sharding.index_region((slice(2, 4), slice(None)), (8, 3)) == ((2, 0), (2, 3))
    with pytest.raises(UnsupportedValue, match="contiguous"):
        jax_sharding.index_region((slice(0, 8, 2),), (8,))
