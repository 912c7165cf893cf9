"""Pytrees and optax states: restored with the target's structure and live types."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from opencheckpoint import Checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.jax import PytreeAdapter, adapter_for  # noqa: E402
from opencheckpoint.format.errors import IncompatibleComponent  # noqa: E402
from opencheckpoint.tree.nodes import NamedTupleValue  # noqa: E402

pytestmark = pytest.mark.jax


class Pair(NamedTuple):
    left: Any
    right: Any


def _params() -> dict[str, Any]:
    keys = jax.random.split(jax.random.key(0), 2)
    return {"dense": {"w": jax.random.normal(keys[0], (3, 2)), "b": jnp.zeros(2)},
            "head": [jax.random.normal(keys[1], (2,))]}


def _loss(params: dict[str, Any], x: jax.Array) -> jax.Array:
    h = jnp.tanh(x @ params["dense"]["w"] + params["dense"]["b"])
    return jnp.sum((h * params["head"][0]) ** 2)


@pytest.fixture(scope="module")
def grad_fn() -> Any:
    return jax.jit(jax.grad(_loss))


@pytest.mark.parametrize("make", [lambda: optax.adam(1e-2), lambda: optax.adamw(1e-2, weight_decay=0.1)],
                         ids=["adam", "adamw"])
def test_optax_state_round_trip_gives_identical_updates(tmp_path: Path, make: Any, grad_fn: Any) -> None:
    tx = make()
    params = _params()
    state = tx.init(params)
    x = jnp.arange(6.0).reshape(2, 3) / 6
    for _ in range(3):
        updates, state = tx.update(grad_fn(params, x), state, params)
        params = optax.apply_updates(params, updates)
    path = Checkpoint().register("opt", state, adapter=PytreeAdapter()).register(
        "params", params, adapter=PytreeAdapter()).save(tmp_path / "c")
    assert isinstance(read_component(path, "opt")[0], NamedTupleValue)

    fresh_params = jax.tree_util.tree_map(jnp.zeros_like, params)
    target = Checkpoint().register("opt", tx.init(fresh_params), adapter=PytreeAdapter()).register(
        "params", fresh_params, adapter=PytreeAdapter())
    result = target.load(path)
    restored_state, restored_params = result.values["opt"], result.values["params"]
    assert jax.tree_util.tree_structure(restored_state) == jax.tree_util.tree_structure(state)
    assert type(restored_state[0]) is type(state[0])  # live optax type, not a NamedTupleValue
    assert fresh_params["dense"]["w"] is restored_params["dense"]["w"]  # dict refreshed in place

    for _ in range(2):
        expected, state = tx.update(grad_fn(params, x), state, params)
        params = optax.apply_updates(params, expected)
        got, restored_state = tx.update(grad_fn(restored_params, x), restored_state, restored_params)
        restored_params = optax.apply_updates(restored_params, got)
    for a, b in zip(jax.tree_util.tree_leaves((params, state)), jax.tree_util.tree_leaves((restored_params,
                                                                                           restored_state)),
                    strict=True):
        assert a.dtype == b.dtype and np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_optax_named_tuple_state_resolves_automatically(tmp_path: Path) -> None:
    state = optax.scale_by_adam().init({"w": jnp.ones(2)})
    assert isinstance(adapter_for(state), PytreeAdapter)
    updated = state._replace(count=jnp.asarray(5, jnp.int32))
    path = Checkpoint(opt=updated).save(tmp_path / "c")
    result = Checkpoint(opt=state).load(path)
    assert type(result.values["opt"]) is type(state) and int(result.values["opt"].count) == 5


def test_structure_comes_from_the_target(tmp_path: Path) -> None:
    value = {"pair": Pair(jnp.ones(2), (jnp.int8(3) * jnp.ones((), jnp.int8), None)),
             "items": [jnp.arange(3), None], "step": 4, "name": "run"}
    path = Checkpoint().register("tree", value, adapter=PytreeAdapter()).save(tmp_path / "c")
    target = {"pair": Pair(jnp.zeros(2), (jnp.zeros((), jnp.int8), None)),
              "items": [jnp.zeros(3, jnp.int32), None], "step": 0, "name": ""}
    restored = Checkpoint().register("tree", target, adapter=PytreeAdapter()).load(path).values["tree"]
    assert type(restored["pair"]) is Pair and type(restored["pair"].right) is tuple
    assert restored["pair"].right[1] is None and restored["items"][1] is None
    assert restored["step"] == 4 and restored["name"] == "run" and target["step"] == 4
    assert int(restored["pair"].right[0]) == 3 and restored["pair"].right[0].dtype == jnp.int8
    np.testing.assert_array_equal(restored["items"][0], np.arange(3))


def test_weak_type_is_kept(tmp_path: Path) -> None:
    path = Checkpoint().register("t", {"lr": jnp.asarray(0.5)}, adapter=PytreeAdapter()).save(tmp_path / "c")
    target = {"lr": jnp.asarray(0.0)}
    assert target["lr"].weak_type
    restored = Checkpoint().register("t", target, adapter=PytreeAdapter()).load(path).values["t"]
    assert restored["lr"].weak_type and float(restored["lr"]) == 0.5


def test_mismatch_names_paths_and_touches_nothing_under_error(tmp_path: Path) -> None:
    path = Checkpoint().register("t", {"a": jnp.ones(3), "b": jnp.ones(2), "extra": jnp.ones(1)},
                                 adapter=PytreeAdapter()).save(tmp_path / "c")
    a, b, c = jnp.zeros(4), jnp.zeros(2), jnp.zeros(1)
    target = {"a": a, "b": b, "c": c}
    ckpt = Checkpoint().register("t", target, adapter=PytreeAdapter())
    with pytest.raises(IncompatibleComponent) as info:
        ckpt.load(path)
    message = str(info.value)
    assert "$.a: stored float32[3] does not fit float32[4]" in message
    assert "missing from the checkpoint: $.c" in message and "not in the target: $.extra" in message
    assert target == {"a": a, "b": b, "c": c} and float(target["b"][0]) == 0.0

    with pytest.warns(UserWarning, match=r"\$\.a: stored"):
        result = Checkpoint(strict="warn").register("t", target, adapter=PytreeAdapter()).load(path)
    # the partial restore is in the result too, not only in a warning
    assert result.loaded == {"t"} and any("$.a: stored float32[3]" in line for line in result.partial["t"])
    assert result.values["t"]["a"] is a and result.values["t"]["c"] is c  # mismatched parts keep their value
    np.testing.assert_array_equal(target["b"], np.ones(2))  # the matching part is loaded
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Checkpoint(strict="ignore").register("t", dict(target), adapter=PytreeAdapter()).load(path)


def test_dtype_mismatch_is_reported(tmp_path: Path) -> None:
    path = Checkpoint().register("t", {"w": jnp.ones(2, jnp.bfloat16)}, adapter=PytreeAdapter()).save(
        tmp_path / "c")
    with pytest.raises(IncompatibleComponent, match=r"\$\.w: stored bfloat16\[2\] does not fit float32\[2\]"):
        Checkpoint().register("t", {"w": jnp.ones(2)}, adapter=PytreeAdapter()).load(path)


def test_frozen_dict_and_named_tuples_stored_with_fields(tmp_path: Path) -> None:
    from flax.core import FrozenDict

    frozen = FrozenDict({"w": jnp.ones(2), "inner": {"v": jnp.arange(2)}})
    path = Checkpoint(params=frozen).save(tmp_path / "c")
    stored = read_component(path, "params")
    assert type(stored) is dict and type(stored["inner"]) is dict
    restored = Checkpoint(params=FrozenDict({"w": jnp.zeros(2), "inner": {"v": jnp.zeros(2, jnp.int32)}})).load(
        path).values["params"]
    assert isinstance(restored, FrozenDict) and restored["inner"]["v"].tolist() == [0, 1]


def test_plain_containers_of_jax_arrays_resolve_to_the_pytree_adapter(tmp_path: Path) -> None:
    state = optax.adam(1e-3).init({"w": jnp.ones(2)})  # a plain tuple at the top
    params = {"w": jnp.arange(3.0)}
    assert isinstance(adapter_for(params), PytreeAdapter)
    path = Checkpoint(opt=state, params=params).save(tmp_path / "c")
    target = {"w": jnp.zeros(3)}
    result = Checkpoint(opt=optax.adam(1e-3).init({"w": jnp.zeros(2)}), params=target).load(path)
    assert isinstance(target["w"], jax.Array) and target["w"].tolist() == [0.0, 1.0, 2.0]
    assert type(result.values["opt"][0]) is type(state[0])
