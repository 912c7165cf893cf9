"""JAX trainer state as users write it: ``flax.struct.dataclass`` and plain dataclass configs round-trip.

Registered dataclasses (``flax.struct.dataclass``) go to the pytree adapter
and come back as their own type, tuple fields as tuples, arrays as JAX
arrays; their static fields (``pytree_node=False``) are stored and compared
with the live target's on load (a difference is a problem under ``strict``);
plain dataclasses holding JAX arrays go to the dataclass adapter and their
arrays come back as JAX arrays (the live leaf decides).
"""

from __future__ import annotations

import dataclasses
import enum
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
struct = pytest.importorskip("flax.struct")

from opencheckpoint import Checkpoint, IncompatibleComponent, read_component  # noqa: E402
from opencheckpoint.adapters.base import DataclassAdapter, resolve_adapter  # noqa: E402
from opencheckpoint.adapters.flax_struct import DESCRIBED  # noqa: E402


@struct.dataclass
class TrainState:
    params: dict[str, Any]
    key: Any
    step: int = 0
    shape: tuple[int, int] = struct.field(pytree_node=False, default=(2, 3))
    betas: tuple[Any, Any] = (0.9, 0.999)
    dtype: Any = struct.field(pytree_node=False, default=jnp.float32)


@struct.dataclass
class Counters:
    episodes: int
    window: tuple[int, int]


@dataclasses.dataclass
class RunConfig:
    lr: float
    hidden: tuple[int, ...]
    mean: Any


def state(seed: int, **static: Any) -> TrainState:
    return TrainState({"w": jnp.full((2, 3), seed, jnp.float32)}, jax.random.key(seed), seed,
                      betas=(jnp.float32(0.5 + seed), 0.25 * seed), **static)


def test_flax_struct_dataclass_round_trips_with_its_type(tmp_path: Path) -> None:
    path = Checkpoint(state=state(3), durable=False).save(tmp_path / "ckpt")
    stored = read_component(path, "state")  # the static fields are in the file, next to the leaves
    assert stored._fields == ("params", "key", "step", "shape", "betas", "dtype")
    assert stored.shape == (2, 3) and type(stored.shape) is tuple and stored.dtype == np.dtype(np.float32)
    result = Checkpoint(state=state(0)).load(path)
    restored = result.values["state"]
    assert type(restored) is TrainState and restored.step == 3 and restored.shape == (2, 3)
    assert restored.dtype is jnp.float32  # equal to the stored one: the live object's own value is kept
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
    from opencheckpoint.tree.decode import empty_array

    empty = empty_array((2**61, 3, 0), np.dtype(np.float32))  # np.zeros refuses this shape for float32
    path = Checkpoint(state={"e": empty}, durable=False).save(tmp_path / "c")
    assert read_component(path, "state")["e"].shape == (2**61, 3, 0)
    with pytest.raises(IncompatibleComponent, match="JAX cannot represent"):
        read_component(path, "state", framework="jax")


# -- static fields (pytree_node=False): stored, compared on load --------------------------------------
@pytest.mark.parametrize(("field", "other"), [("shape", (4, 5)), ("dtype", jnp.bfloat16)])
def test_a_static_field_that_differs_is_incompatible_and_nothing_changes(tmp_path: Path, field: str,
                                                                          other: Any) -> None:
    path = Checkpoint(state=state(3), durable=False).save(tmp_path / "ckpt")
    live = state(0, **{field: other})
    with pytest.raises(IncompatibleComponent, match=rf"\.{field}: static field \(pytree_node=False\) differs"):
        Checkpoint(state=live).load(path)
    assert float(live.params["w"][0, 0]) == 0.0 and getattr(live, field) == other


def test_a_static_field_that_differs_warns_or_is_ignored_per_strict(tmp_path: Path) -> None:
    path = Checkpoint(state=state(3), durable=False).save(tmp_path / "ckpt")
    with pytest.warns(UserWarning, match=r"\.shape: static field .* holds \(2, 3\), the target \(4, 5\)"):
        restored = Checkpoint(state=state(0, shape=(4, 5))).load(path, strict="warn").values["state"]
    assert restored.shape == (4, 5) and restored.step == 3  # the leaves load; the live structure stays
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        restored = Checkpoint(state=state(0, shape=(4, 5))).load(path, strict="ignore").values["state"]
    assert restored.shape == (4, 5) and restored.step == 3


def test_a_record_without_stored_static_fields_keeps_the_live_ones(tmp_path: Path) -> None:
    """Checkpoints written before static fields were stored hold none of them: they still load, as before."""
    @struct.dataclass
    class Before:
        count: Any

    @struct.dataclass
    class After:
        count: Any
        mode: str = struct.field(pytree_node=False, default="train")

    path = Checkpoint(state={"w": jnp.ones(2), "s": Before(jnp.int32(4))}, durable=False).save(tmp_path / "ckpt")
    restored = Checkpoint(state={"w": jnp.ones(2), "s": After(jnp.int32(0), mode="eval")}).load(path)
    state_ = restored.values["state"]
    assert int(state_["s"].count) == 4 and state_["s"].mode == "eval"


def test_a_static_field_the_checkpoint_lacks_beside_stored_ones_is_missing(tmp_path: Path) -> None:
    @struct.dataclass
    class Before:
        count: Any
        kind: str = struct.field(pytree_node=False, default="a")

    @struct.dataclass
    class After:
        count: Any
        kind: str = struct.field(pytree_node=False, default="a")
        mode: str = struct.field(pytree_node=False, default="train")

    path = Checkpoint(state={"w": jnp.ones(2), "s": Before(jnp.int32(4))}, durable=False).save(tmp_path / "ckpt")
    with pytest.raises(IncompatibleComponent, match=r"missing from the checkpoint: \$\.s\.mode"):
        Checkpoint(state={"w": jnp.ones(2), "s": After(jnp.int32(0))}).load(path)


def test_static_functions_are_stored_by_name_and_compared(tmp_path: Path) -> None:
    """flax's TrainState keeps apply_fn and tx static: described by name (no code is stored), compared by it."""
    import optax
    from flax.training import train_state

    def apply_a(params: Any, x: Any) -> Any:
        return x

    def apply_b(params: Any, x: Any) -> Any:
        return -x

    def make(apply_fn: Any, value: float) -> Any:
        return train_state.TrainState.create(apply_fn=apply_fn, params={"w": jnp.full(2, value)}, tx=optax.sgd(0.1))

    path = Checkpoint(ts=make(apply_a, 1.0), durable=False).save(tmp_path / "ckpt")
    stored = read_component(path, "ts")
    assert stored.apply_fn.type_name == DESCRIBED and stored.apply_fn.description.endswith(".apply_a")
    assert stored.tx.init.type_name == DESCRIBED  # an optax transformation: a named tuple of two functions
    restored = Checkpoint(ts=make(apply_a, 0.0)).load(path).values["ts"]
    assert restored.apply_fn is apply_a and restored.params["w"].tolist() == [1.0, 1.0]
    with pytest.raises(IncompatibleComponent, match=r"\.apply_fn: static field .*apply_a.*apply_b"):
        Checkpoint(ts=make(apply_b, 0.0)).load(path)


class Mode(enum.Enum):
    TRAIN = "train"
    EVAL = "eval"


@struct.dataclass
class Phase:
    count: Any
    mode: Mode = struct.field(pytree_node=False, default=Mode.TRAIN)
    nested: Any = struct.field(pytree_node=False, default=None)


def test_enum_and_self_containing_static_values_are_described(tmp_path: Path) -> None:
    loop: list[Any] = []
    loop.append(loop)  # a container holding itself: described past 32 levels, never a RecursionError
    path = Checkpoint(phase=Phase(jnp.int32(3), nested=loop), durable=False).save(tmp_path / "ckpt")
    stored = read_component(path, "phase")
    assert stored.mode.description == "enum member test_jax_fidelity.Mode.TRAIN"
    assert Checkpoint(phase=Phase(jnp.int32(0), nested=loop)).load(path).values["phase"].count == 3
    with pytest.raises(IncompatibleComponent, match=r"\.mode: static field .*Mode\.TRAIN, the target .*Mode\.EVAL"):
        Checkpoint(phase=Phase(jnp.int32(0), Mode.EVAL, nested=loop)).load(path)
