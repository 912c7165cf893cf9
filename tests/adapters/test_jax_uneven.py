"""Uneven shardings and sharded PRNG keys on an 8-device CPU mesh (issue 10).

JAX (0.10 here) builds only even shardings: ``device_put``, a ``jit`` with ``out_shardings``,
``make_array_from_callback`` and ``make_array_from_single_device_arrays`` all raise for ``(10, 3)``
with ``P('x')`` over 4 devices. So uneven *stored* layouts (10 rows as 3, 3, 3, 1, as torch or another
writer stores them) are restored onto even JAX shardings, and an uneven *target* (a
``ShapeDtypeStruct`` accepts one) is refused with a ``CheckpointError`` naming the array. PRNG keys
are stored whole (a key's ``data`` is a tag-6 array, spec R-TREE-26) and restored onto any sharding.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters import jax_sharding  # noqa: E402
from opencheckpoint.format.errors import IncompatibleComponent, UnsupportedValue  # noqa: E402
from opencheckpoint.sharding import LocalShard, ShardedValue  # noqa: E402
from opencheckpoint.tree.nodes import PRNGKeyValue  # noqa: E402

pytestmark = [
    pytest.mark.jax,
    pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 JAX devices (conftest.py sets XLA_FLAGS "
                                                      "before JAX starts; JAX was started elsewhere first)"),
]

FULL = np.arange(30, dtype=np.float32).reshape(10, 3)
ROWS = [(0, 3), (3, 3), (6, 3), (9, 1)]  # 10 rows over 4 ranks, as torch's Shard(0) splits them


def mesh(shape: tuple[int, int]) -> Any:
    return jax.make_mesh(shape, ("x", "y"))


def uneven(tmp_path: Path) -> Path:
    """A checkpoint whose (10, 3) array is stored as 4 row blocks of 3, 3, 3 and 1 rows."""
    value = ShardedValue((10, 3), "float32", [LocalShard((r, 0), FULL[r:r + n]) for r, n in ROWS])
    return Checkpoint(state={"w": value}).save(tmp_path / "uneven")


@pytest.mark.parametrize(("shape", "spec"), [((2, 4), P("x")), ((4, 2), P(None, None)), ((2, 4), P("x", None))],
                         ids=["rows-over-2", "replicated", "rows-over-2-explicit"])
def test_unevenly_stored_blocks_restore_onto_an_even_sharding(tmp_path: Path, shape: tuple[int, int],
                                                              spec: Any) -> None:
    path = uneven(tmp_path)
    sharding = NamedSharding(mesh(shape), spec)
    target = {"w": jax.ShapeDtypeStruct((10, 3), jnp.float32, sharding=sharding)}
    restored = Checkpoint(state=target).load(path).values["state"]["w"]
    assert restored.sharding == sharding
    for shard in restored.addressable_shards:  # blocks of 5 rows cross the stored blocks' edges
        np.testing.assert_array_equal(np.asarray(shard.data), FULL[shard.index])


def test_uneven_target_sharding_is_refused_naming_the_array(tmp_path: Path) -> None:
    path = uneven(tmp_path)
    four = NamedSharding(mesh((4, 2)), P("x"))  # 10 rows over 4 devices: no jax.Array can have it
    target = {"w": jax.ShapeDtypeStruct((10, 3), jnp.float32, sharding=four)}
    with pytest.raises(IncompatibleComponent, match=r"\$\.w: JAX cannot lay out an array of shape \[10, 3\]"):
        Checkpoint(state=target).load(path)
    with pytest.raises(IncompatibleComponent, match="JAX cannot lay out an array of shape"):
        read_component(path, "state", framework="jax", map_location=four)


def test_uneven_device_blocks_are_saved_as_they_are(tmp_path: Path) -> None:
    # A jax.Array of an uneven sharding (JAX versions that build one): each device block with its own size.
    blocks = [SimpleNamespace(index=(slice(r, r + n), slice(None)), data=FULL[r:r + n], replica_id=0)
              for r, n in ROWS]
    blocks.append(SimpleNamespace(index=(slice(0, 3), slice(None)), data=FULL[0:3], replica_id=1))  # a replica
    array = SimpleNamespace(shape=(10, 3), dtype=np.dtype(np.float32), addressable_shards=blocks)
    path = Checkpoint(state={"w": jax_sharding.sharded_value(array)}).save(tmp_path / "c")  # type: ignore[arg-type]
    with open_checkpoint(path) as ckpt:
        stored = sorted((tuple(s.start), tuple(s.size)) for s in ckpt.tree("state")["w"].ref.shards)
    assert stored == [((r, 0), (n, 3)) for r, n in ROWS]
    np.testing.assert_array_equal(read_component(path, "state")["w"], FULL)


def test_a_padded_device_block_is_refused() -> None:
    padded = SimpleNamespace(index=(slice(9, 10), slice(None)), data=np.zeros((3, 3), np.float32), replica_id=0)
    array = SimpleNamespace(shape=(10, 3), dtype=np.dtype(np.float32), addressable_shards=[padded])
    with pytest.raises(UnsupportedValue, match=r"has shape \[3, 3\].*names \[1, 3\]"):
        jax_sharding.sharded_value(array)  # type: ignore[arg-type]


def keys(shape: tuple[int, ...], spec: Any, layout: tuple[int, int] = (4, 2)) -> Any:
    batch = jax.random.split(jax.random.key(7), int(np.prod(shape))).reshape(shape)
    return jax.device_put(batch, NamedSharding(mesh(layout), spec))


@pytest.mark.parametrize(("shape", "saved", "wanted"), [((8,), P("x"), P("y")), ((4, 8), P("x", "y"), P(None, "x"))],
                         ids=["batch-8", "batch-4x8"])
def test_sharded_prng_keys_are_stored_whole_and_restore_onto_another_sharding(
        tmp_path: Path, shape: tuple[int, ...], saved: Any, wanted: Any) -> None:
    live = keys(shape, saved)
    path = Checkpoint(state={"k": live}).save(tmp_path / "c")
    assert json.loads((path / "manifest.json").read_text())["format_version"] == 1  # no sharded array node
    stored = read_component(path, "state")["k"]
    assert isinstance(stored, PRNGKeyValue) and stored.data.dtype == np.uint32 and stored.data.shape == (*shape, 2)
    sharding = NamedSharding(mesh((2, 4)), wanted)
    target = {"k": jax.ShapeDtypeStruct(shape, live.dtype, sharding=sharding)}
    restored = Checkpoint(state=target).load(path).values["state"]["k"]
    assert restored.dtype == live.dtype and restored.sharding == sharding
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(restored)), np.asarray(jax.random.key_data(live)))
    into_live = Checkpoint(state={"k": keys(shape, wanted, (2, 4))}).load(path).values["state"]["k"]
    assert into_live.sharding == sharding
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(into_live)), np.asarray(jax.random.key_data(live)))


def test_uneven_target_sharding_of_keys_is_refused_naming_them(tmp_path: Path) -> None:
    path = Checkpoint(state={"k": jax.random.split(jax.random.key(0), 10)}).save(tmp_path / "c")
    four = NamedSharding(mesh((4, 2)), P("x"))
    target = {"k": jax.ShapeDtypeStruct((10,), jax.random.key(0).dtype, sharding=four)}
    with pytest.raises(IncompatibleComponent, match=r"\$\.k: JAX cannot lay out an array of shape \[10, 2\]"):
        Checkpoint(state=target).load(path)
