"""Restoring JAX state into a model that changed: wrapped NNX modules and optimizers, dtypes, parts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402

from opencheckpoint import Checkpoint, IncompatibleComponent, read_component  # noqa: E402
from opencheckpoint.adapters.jax import restore_nnx  # noqa: E402
from opencheckpoint.read.restore_plan import unflatten  # noqa: E402
from opencheckpoint.tools.interchange import torch_to_nnx_rename  # noqa: E402

pytestmark = pytest.mark.jax


class Net(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.encoder = nnx.List([nnx.Linear(3, 4, rngs=rngs), nnx.Linear(4, 4, rngs=rngs)])
        self.head = nnx.Linear(4, 2, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.head(self.encoder[1](self.encoder[0](x)))


class Wrapper(nnx.Module):
    """A module holding the model as ``self.module`` (data-parallel wrappers' layout)."""

    def __init__(self, module: nnx.Module) -> None:
        self.module = module

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.module(x)


def _pure(value: Any) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(nnx.state(value)))[0]
    return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in flat}


def _trained_optimizer(model: nnx.Module) -> Any:
    optimizer = nnx.Optimizer(model, optax.adam(0.1), wrt=nnx.Param)
    grads = nnx.grad(lambda m: m(jnp.ones((2, 3))).sum())(model)
    optimizer.update(model, grads)
    return optimizer


def test_wrapped_nnx_model_and_optimizer_restore_into_the_plain_model(tmp_path: Path) -> None:
    saved = Net(nnx.Rngs(0))
    wrapped = Wrapper(saved)
    optimizer = _trained_optimizer(wrapped)
    path = Checkpoint(model=wrapped, optimizer=optimizer).save(tmp_path / "c")
    plain = Net(nnx.Rngs(1))
    plain_optimizer = nnx.Optimizer(plain, optax.adam(0.1), wrt=nnx.Param)
    before = _pure(plain)

    with pytest.raises(IncompatibleComponent, match=r"pass rename=\{'module\.': ''\}"):
        Checkpoint(model=plain, optimizer=plain_optimizer).load(path)
    assert all(np.array_equal(before[k], v) for k, v in _pure(plain).items())  # nothing renamed unless asked

    result = Checkpoint(model=plain, optimizer=plain_optimizer).load(path, rename={"module.": ""})
    assert result.loaded == {"model", "optimizer"} and result.unused == {} and result.conversions == []
    assert _pure(plain).keys() == _pure(saved).keys()
    assert all(np.array_equal(v, _pure(saved)[k]) for k, v in _pure(plain).items())
    # the optimizer's moments follow the renamed parameters (they sit below opt_state.0.mu / .nu)
    theirs = nnx.to_pure_dict(nnx.state(optimizer))["opt_state"][0]
    mine = nnx.to_pure_dict(nnx.state(plain_optimizer))["opt_state"][0]
    for moment in ("mu", "nu"):
        assert np.array_equal(mine[moment]["head"]["kernel"], theirs[moment]["module"]["head"]["kernel"])
        assert np.array_equal(mine[moment]["encoder"][1]["bias"], theirs[moment]["module"]["encoder"][1]["bias"])
    assert int(nnx.to_pure_dict(nnx.state(plain_optimizer))["step"]) == 1


def test_pytree_params_and_optax_state_follow_a_rename(tmp_path: Path) -> None:
    params = {"module": {"w": jnp.arange(4.0), "b": jnp.ones(2)}}
    tx = optax.adam(0.1)
    state = tx.init(params)
    state = tx.update(params, state, params)[1]
    path = Checkpoint(params=params, opt_state=state).save(tmp_path / "c")
    plain = {"w": jnp.zeros(4), "b": jnp.zeros(2)}
    plain_state = tx.init(plain)
    result = Checkpoint(params=plain, opt_state=plain_state).load(path, rename={"module": ""})
    restored = result.values["opt_state"]
    assert np.array_equal(plain["w"], params["module"]["w"])
    assert np.array_equal(restored[0].mu["w"], state[0].mu["module"]["w"])
    assert type(restored[0]) is type(plain_state[0])


def test_bf16_params_into_fp32_target_need_cast_and_keep_nan_and_signed_zero(tmp_path: Path) -> None:
    bits = np.array([0x3FC0, 0x8000, 0x7FC5, 0xFF81], np.uint16)  # 1.5, -0.0, NaN payloads (one negative)
    stored = jnp.asarray(bits.view(jnp.bfloat16))
    path = Checkpoint(params={"w": stored, "n": jnp.ones(2, jnp.bfloat16)}).save(tmp_path / "c")
    target = {"w": jnp.zeros(4, jnp.float32), "n": jnp.zeros(2, jnp.float32)}
    with pytest.raises(IncompatibleComponent, match=r"\$\.w: stored bfloat16\[4\] does not fit float32\[4\]") as info:
        Checkpoint(params=target).load(path)
    assert "$.n: stored bfloat16[2]" in str(info.value) and "pass cast='widening'" in str(info.value)
    result = Checkpoint(params=target).load(path, cast="widening")
    assert sorted((c.path, c.stored, c.target, c.lossy) for c in result.conversions) == [
        ("n", "bfloat16", "float32", False), ("w", "bfloat16", "float32", False)]
    restored = np.asarray(target["w"])
    assert restored.dtype == np.float32
    assert restored.view(np.uint32).tolist() == [int(b) << 16 for b in bits]


def test_nnx_cast_refusals_name_the_array(tmp_path: Path) -> None:
    path = Checkpoint(model=nnx.Linear(2, 3, rngs=nnx.Rngs(0))).save(tmp_path / "c")
    half = nnx.Linear(2, 3, rngs=nnx.Rngs(1), param_dtype=jnp.bfloat16)
    with pytest.raises(IncompatibleComponent, match=r"\$\.kernel: .*cast='widening' refuses it"):
        Checkpoint(model=half).load(path, cast="widening")
    result = Checkpoint(model=half).load(path, cast=True)
    assert {c.path for c in result.conversions} == {"kernel", "bias"} and half.kernel[...].dtype == jnp.bfloat16


def test_encoder_part_restores_into_a_separate_module_and_the_rest_is_reported_unused(tmp_path: Path) -> None:
    saved = Net(nnx.Rngs(0))
    path = Checkpoint(model=saved).save(tmp_path / "c")
    first = nnx.Linear(3, 4, rngs=nnx.Rngs(5))
    with pytest.raises(IncompatibleComponent, match="subtree="):
        Checkpoint(model=first).load(path)
    result = Checkpoint(model=first).load(path, subtree="encoder.0")
    assert np.array_equal(first.kernel[...], saved.encoder[0].kernel[...])
    assert sorted(result.unused["model"]) == ["encoder.1.bias", "encoder.1.kernel", "head.bias", "head.kernel"]
    # an abstract target through restore_nnx takes the same options
    abstract = nnx.eval_shape(lambda: nnx.Linear(4, 2, rngs=nnx.Rngs(0)))
    head = restore_nnx(path, "model", abstract, subtree="head")
    assert np.array_equal(head.kernel[...], saved.head.kernel[...])


def test_partial_restore_checks_shapes_before_touching_anything(tmp_path: Path) -> None:
    path = Checkpoint(model=Net(nnx.Rngs(0))).save(tmp_path / "c")
    wrong = Net(nnx.Rngs(5)).encoder  # fits encoder.0 and encoder.1 ...
    wrong[1] = nnx.Linear(4, 3, rngs=nnx.Rngs(6))  # ... except encoder.1's shapes
    before = _pure(wrong)
    with pytest.raises(IncompatibleComponent, match=r"\$\[1\]\.kernel: stored float32\[4, 4\] does not fit"):
        Checkpoint(model=wrong).load(path, subtree="encoder")
    assert all(np.array_equal(before[k], v) for k, v in _pure(wrong).items())  # encoder.0 untouched too


def test_torch_names_via_read_component_rename(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(3, 2)
    path = Checkpoint(policy=torch.nn.Sequential(layer)).save(tmp_path / "c")
    flat = read_component(path, "policy", rename=torch_to_nnx_rename({"0": "hidden"}))
    assert list(flat) == ["hidden.kernel", "hidden.bias"]  # a flat state dict stays flat, keys renamed
    params = unflatten(flat)
    assert np.array_equal(params["hidden"]["kernel"], layer.weight.detach().numpy())  # names only: no transpose
