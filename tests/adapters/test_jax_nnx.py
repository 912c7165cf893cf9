"""Flax NNX modules, optimizers and states: every Variable type, typed RNG keys, abstract targets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from opencheckpoint import Checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.jax import NnxAdapter, adapter_for, restore_nnx  # noqa: E402
from opencheckpoint.format.errors import IncompatibleComponent  # noqa: E402
from opencheckpoint.tree.nodes import PRNGKeyValue  # noqa: E402

pytestmark = pytest.mark.jax


class RunningStat(nnx.Variable):  # a custom Variable subclass, like a normalizer's statistics
    pass


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs, width: int = 4) -> None:
        self.layers = nnx.List([nnx.Linear(3, width, rngs=rngs), nnx.Linear(width, 2, rngs=rngs)])
        self.norm = nnx.BatchNorm(width, rngs=rngs)
        self.stat = RunningStat(jnp.zeros(3))
        self.dropout = nnx.Dropout(0.5, rngs=nnx.Rngs(dropout=jax.random.key(1, impl="rbg")))

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.norm(jax.nn.relu(self.layers[0](x)))
        return self.layers[1](self.dropout(h))


def _leaves(module: Any) -> list[Any]:
    return jax.tree_util.tree_leaves(nnx.to_pure_dict(nnx.state(module)))


def _same(a: Any, b: Any) -> None:
    for x, y in zip(_leaves(a), _leaves(b), strict=True):
        assert x.dtype == y.dtype
        data = (lambda k: jax.random.key_data(k)) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else (
            lambda k: k)
        assert np.asarray(data(x)).tobytes() == np.asarray(data(y)).tobytes()


@pytest.fixture(scope="module")
def trained() -> Net:
    net = Net(nnx.Rngs(0, dropout=2))
    net.train()
    net(jnp.ones((5, 3)))  # moves BatchStats, the dropout RngCount and the RngKey stream
    net.stat.set_value(jnp.arange(3.0))
    return net


def test_module_round_trip_in_place(tmp_path: Path, trained: Net) -> None:
    assert isinstance(adapter_for(trained), NnxAdapter)
    path = Checkpoint(model=trained).save(tmp_path / "c")
    stored = read_component(path, "model")
    assert stored["dropout"]["rngs"]["key"].impl == "rbg"
    assert isinstance(stored["dropout"]["rngs"]["key"], PRNGKeyValue)
    assert stored["stat"].tolist() == [0.0, 1.0, 2.0] and stored["norm"]["mean"].shape == (4,)
    fresh = Net(nnx.Rngs(9, dropout=9))
    kernel_variable = fresh.layers[0].kernel
    Checkpoint(model=fresh).load(path)
    assert fresh.layers[0].kernel is kernel_variable  # updated in place, same Variable objects
    assert type(fresh.stat) is RunningStat
    _same(fresh, trained)
    fresh.train()
    trained_copy = nnx.clone(trained)
    np.testing.assert_array_equal(fresh(jnp.ones((2, 3))), trained_copy(jnp.ones((2, 3))))  # dropout streams too


def test_abstract_target_from_eval_shape(tmp_path: Path, trained: Net) -> None:
    path = Checkpoint(model=trained).save(tmp_path / "c")
    abstract = nnx.eval_shape(lambda: Net(nnx.Rngs(0, dropout=0)))
    restored = restore_nnx(path, "model", abstract)
    assert isinstance(restored.layers[0].kernel.get_value(), jax.Array)
    _same(restored, trained)
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Net(nnx.Rngs(0, dropout=0))))
    _same(restore_nnx(path, "model", (graphdef, state)), trained)
    wider = nnx.eval_shape(lambda: Net(nnx.Rngs(0), width=5))
    with pytest.raises(IncompatibleComponent, match=r"\$\.layers\[0\]\.kernel: stored float32\[3, 4\]"):
        restore_nnx(path, "model", wider)
    with pytest.raises(IncompatibleComponent, match="abstract target leaves left without a value"):
        restore_nnx(path, "model", wider, strict="warn")


def test_mismatch_raises_before_touching_the_module(tmp_path: Path, trained: Net) -> None:
    path = Checkpoint(model=trained).save(tmp_path / "c")
    wider = Net(nnx.Rngs(3), width=5)
    before = nnx.to_pure_dict(nnx.state(wider))
    with pytest.raises(IncompatibleComponent) as info:
        Checkpoint(model=wider).load(path)
    assert "$.norm.mean: stored float32[4] does not fit float32[5]" in str(info.value)
    after = jax.tree_util.tree_leaves(nnx.to_pure_dict(nnx.state(wider)))
    assert all(a is b for a, b in zip(after, jax.tree_util.tree_leaves(before), strict=True))  # untouched
    with pytest.warns(UserWarning, match="does not fit"):
        Checkpoint(model=wider, strict="warn").load(path)
    np.testing.assert_array_equal(wider.stat.get_value(), np.arange(3.0))  # matching part loaded
    assert wider.norm.mean.get_value().shape == (5,)


def test_optimizer_round_trip_and_identical_steps(tmp_path: Path) -> None:
    def make() -> tuple[Net, nnx.Optimizer]:
        net = Net(nnx.Rngs(0, dropout=1))
        return net, nnx.Optimizer(net, optax.adam(1e-2), wrt=nnx.Param)

    @nnx.jit
    def step(net: Net, opt: nnx.Optimizer, x: jax.Array) -> None:
        grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(net)
        opt.update(net, grads)

    x = jnp.linspace(0, 1, 12).reshape(4, 3)
    net, opt = make()
    for _ in range(2):
        step(net, opt, x)
    path = Checkpoint(model=net, optimizer=opt).save(tmp_path / "c")
    net2, opt2 = make()
    Checkpoint(model=net2, optimizer=opt2).load(path)
    assert int(opt2.step.get_value()) == 2
    for _ in range(2):
        step(net, opt, x)
        step(net2, opt2, x)
    _same(net2, net)
    _same(opt2, opt)


def test_nnx_state_component(tmp_path: Path, trained: Net) -> None:
    state = nnx.state(trained, nnx.BatchStat)
    path = Checkpoint(stats=state).save(tmp_path / "c")
    target = nnx.state(Net(nnx.Rngs(4)), nnx.BatchStat)
    Checkpoint(stats=target).load(path)
    np.testing.assert_array_equal(nnx.to_pure_dict(target)["norm"]["var"], trained.norm.var.get_value())
