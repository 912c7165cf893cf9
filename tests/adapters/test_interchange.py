"""torch <-> JAX interchange: identical bits for every shared dtype, and a policy moved across frameworks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
import jax.numpy as jnp  # noqa: E402

from opencheckpoint import Checkpoint, read_component  # noqa: E402
from opencheckpoint.adapters.torch import TORCH_DTYPES  # noqa: E402
from opencheckpoint.format.dtypes import DTYPES, numpy_dtype  # noqa: E402
from opencheckpoint.format.errors import IncompatibleComponent  # noqa: E402
from opencheckpoint.tools.interchange import Layer, nnx_to_torch_state, torch_state_to_nnx  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.jax]

SHARED = [name for name in DTYPES if name in TORCH_DTYPES]
X64 = {"int64", "uint64", "float64", "complex128"}


def _torch_bits(name: str) -> torch.Tensor:
    """A tensor of arbitrary bit patterns (bools 0/1), built from raw bytes."""
    raw = np.random.default_rng(len(name) + 1).integers(0, 256, size=24 * numpy_dtype(name).itemsize,
                                                        dtype=np.uint8)
    if name == "bool":
        raw &= 1
    return torch.frombuffer(bytearray(raw.tobytes()), dtype=TORCH_DTYPES[name]).reshape(4, 6)


def _torch_bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("name", SHARED)
def test_torch_to_jax_to_torch_keeps_bits(tmp_path: Path, name: str) -> None:
    original = _torch_bits(name)
    first = Checkpoint(state={"t": original}).save(tmp_path / "torch")
    with jax.enable_x64(name in X64):
        as_jax = read_component(first, "state", framework="jax")["t"]
        assert isinstance(as_jax, jax.Array) and as_jax.dtype == numpy_dtype(name)
        assert np.asarray(as_jax).tobytes() == _torch_bytes(original)
        second = Checkpoint(state={"t": as_jax}).save(tmp_path / "jax")
    back = read_component(second, "state", framework="torch")["t"]
    assert back.dtype == original.dtype and back.shape == original.shape
    assert _torch_bytes(back) == _torch_bytes(original)


class TorchActorCritic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.actor = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        self.critic = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        self.norm = torch.nn.LayerNorm(5)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.norm(obs)
        return self.actor(x), self.critic(x)


class NnxActorCritic(nnx.Module):
    def __init__(self, rngs: nnx.Rngs) -> None:
        self.norm = nnx.LayerNorm(5, epsilon=1e-5, rngs=rngs)
        self.actor_hidden = nnx.Linear(5, 8, rngs=rngs)
        self.actor_out = nnx.Linear(8, 3, rngs=rngs)
        self.critic_hidden = nnx.Linear(5, 8, rngs=rngs)
        self.critic_out = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = self.norm(obs)
        return (self.actor_out(jnp.tanh(self.actor_hidden(x))), self.critic_out(jnp.tanh(self.critic_hidden(x))))


MAPPING = {"actor.0": "actor_hidden", "actor.2": "actor_out", "critic.0": "critic_hidden",
           "critic.2": "critic_out", "norm": Layer("norm", "layernorm")}


def test_torch_policy_runs_in_nnx_and_comes_back(tmp_path: Path) -> None:
    torch.manual_seed(0)
    policy = TorchActorCritic()
    with torch.no_grad():
        policy.norm.weight.uniform_(0.5, 1.5)
        policy.norm.bias.uniform_(-0.5, 0.5)
    path = Checkpoint(policy=policy).save(tmp_path / "torch")

    params = torch_state_to_nnx(read_component(path, "policy", framework="jax"), MAPPING)
    model = NnxActorCritic(nnx.Rngs(1))
    state = nnx.state(model)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
    np.testing.assert_array_equal(model.actor_hidden.kernel.get_value(), policy.actor[0].weight.detach().numpy().T)

    obs = np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32)
    with torch.no_grad():
        logits, value = policy(torch.from_numpy(obs))
    jax_logits, jax_value = model(jnp.asarray(obs))
    np.testing.assert_allclose(np.asarray(jax_logits), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(jax_value), value.numpy(), rtol=1e-5, atol=1e-5)

    # and back: the NNX model saved with OpenCheckpoint, read as torch tensors, loaded into a torch module
    jax_path = Checkpoint(model=model).save(tmp_path / "jax")
    back = nnx_to_torch_state(read_component(jax_path, "model", framework="torch"), MAPPING)
    fresh = TorchActorCritic()
    fresh.load_state_dict(back)
    for key, tensor in policy.state_dict().items():
        assert _torch_bytes(fresh.state_dict()[key]) == _torch_bytes(tensor), key


def test_conv_and_embedding_layouts() -> None:
    conv = torch.nn.Conv2d(2, 4, kernel_size=(3, 5))
    embed = torch.nn.Embedding(6, 3)
    state = {f"conv.{k}": v.detach() for k, v in conv.state_dict().items()}
    state.update({f"emb.{k}": v.detach() for k, v in embed.state_dict().items()})
    mapping = {"conv": Layer("blocks.0.conv", "conv"), "emb": Layer("embed", "embedding")}
    params = torch_state_to_nnx(state, mapping)
    assert params["blocks"][0]["conv"]["kernel"].shape == (3, 5, 2, 4)  # nnx.Conv layout
    nnx_conv = nnx.Conv(2, 4, kernel_size=(3, 5), padding="VALID", rngs=nnx.Rngs(0))
    nnx_conv.kernel.set_value(jnp.asarray(params["blocks"][0]["conv"]["kernel"].numpy()))
    nnx_conv.bias.set_value(jnp.asarray(params["blocks"][0]["conv"]["bias"].numpy()))
    image = np.random.default_rng(1).normal(size=(1, 2, 6, 8)).astype(np.float32)
    with torch.no_grad():
        expected = conv(torch.from_numpy(image)).numpy()
    got = np.asarray(nnx_conv(jnp.asarray(image.transpose(0, 2, 3, 1)))).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    back = nnx_to_torch_state(params, mapping)
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


def test_unmapped_and_wrong_parameters_are_reported() -> None:
    state = {"0.weight": np.ones((2, 3), np.float32), "1.weight": np.ones((2, 2), np.float32)}
    with pytest.raises(IncompatibleComponent, match=r"1\.weight"):
        torch_state_to_nnx(state, {"0": "a"})
    assert set(torch_state_to_nnx(state, {"0": "a"}, strict=False)) == {"a"}
    with pytest.raises(IncompatibleComponent, match="no parameter 'running_mean'"):
        torch_state_to_nnx({"0.running_mean": np.ones(2)}, {"0": "a"})
    with pytest.raises(IncompatibleComponent, match="no 'b'"):
        nnx_to_torch_state({"a": {}}, {"0": "b"})
