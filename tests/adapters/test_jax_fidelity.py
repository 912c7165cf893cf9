"""JAX trainer state as users write it: ``flax.struct.dataclass`` and plain dataclass configs round-trip.

Registered dataclasses (``flax.struct.dataclass``) go to the pytree adapter
and come back as their own type, tuple fields as tuples, arrays as JAX
arrays; plain dataclasses holding JAX arrays go to the dataclass adapter and
their arrays come back as JAX arrays (the live leaf decides).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
struct = pytest.importorskip("flax.struct")

from opencheckpoint import Checkpoint  # noqa: E402
from opencheckpoint.adapters.base import DataclassAdapter, resolve_adapter  # noqa: E402


@struct.dataclass
class TrainState:
    params: dict[str, Any]
    key: Any
    step: int = 0
    shape: tuple[int, int] = struct.field(pytree_node=False, default=(2, 3))
    betas: tuple[Any, Any] = (0.9, 0.999)


@struct.dataclass
class Counters:
    episodes: int
    window: tuple[int, int]


@dataclasses.dataclass
class RunConfig:
    lr: float
    hidden: tuple[int, ...]
    mean: Any


def state(seed: int) -> TrainState:
    return TrainState({"w": jnp.full((2, 3), seed, jnp.float32)}, jax.random.key(seed), seed,
                      betas=(jnp.float32(0.5 + seed), 0.25 * seed))


def test_flax_struct_dataclass_round_trips_with_its_type(tmp_path: Path) -> None:
    path = Checkpoint(state=state(3), durable=False).save(tmp_path / "ckpt")
    result = Checkpoint(state=state(0)).load(path)
    restored = result.values["state"]
    assert type(restored) is TrainState and restored.step == 3 and restored.shape == (2, 3)
    assert isinstance(restored.params["w"], jax.Array) and float(restored.params["w"][0, 0]) == 3.0
    assert type(restored.betas) is tuple and float(restored.betas[0]) == 3.5 and restored.betas[1] == 0.75
    assert np.array_equal(jax.random.key_data(restored.key), jax.random.key_data(jax.random.key(3)))


def test_flax_struct_dataclass_without_jax_leaves_keeps_its_type(tmp_path: Path) -> None:
    path = Checkpoint(counters=Counters(5, (1, 2)), durable=False).save(tmp_path / "ckpt")
    restored = Checkpoint(counters=Counters(0, (0, 0))).load(path).values["counters"]
    assert restored == Counters(5, (1, 2)) and type(restored.window) is tuple


def test_plain_dataclass_config_with_jax_arrays(tmp_path: Path) -> None:
    config = RunConfig(0.5, (64, 32), jnp.arange(3.0))
    assert isinstance(resolve_adapter(config), DataclassAdapter)
    path = Checkpoint(config=config, durable=False).save(tmp_path / "ckpt")
    live = RunConfig(0.0, (0,), jnp.zeros(3))
    Checkpoint(config=live).load(path)
    assert live.lr == 0.5 and live.hidden == (64, 32) and type(live.hidden) is tuple
    assert isinstance(live.mean, jax.Array) and live.mean.tolist() == [0.0, 1.0, 2.0]


def test_zero_element_array_jax_cannot_hold_is_a_checkpoint_error(tmp_path: Path) -> None:
    from opencheckpoint import IncompatibleComponent, read_component
    from opencheckpoint.tree.decode import empty_array

    empty = empty_array((2**61, 3, 0), np.dtype(np.float32))  # np.zeros refuses this shape for float32
    path = Checkpoint(state={"e": empty}, durable=False).save(tmp_path / "c")
    assert read_component(path, "state")["e"].shape == (2**61, 3, 0)
    with pytest.raises(IncompatibleComponent, match="JAX cannot represent"):
        read_component(path, "state", framework="jax")
