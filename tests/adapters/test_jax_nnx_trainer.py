"""The NNX PPO trainer's full TrainingState saved and restored without pickle (seed nnx_ppo_checkpointing).

The seed splits RngKey variables out and pickles them, with env state and the
training key, because orbax cannot store typed PRNG keys. Here the whole state
(an NNX actor-critic with RngKey/RngCount and a custom Variable, an
nnx.Optimizer over optax.adam, network states, env states holding a typed key,
the training key and the step count) goes through OpenCheckpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
optax = pytest.importorskip("optax")
import jax.numpy as jnp  # noqa: E402
from flax import struct  # noqa: E402

from opencheckpoint import Checkpoint, open_checkpoint  # noqa: E402
from opencheckpoint.adapters.jax import PytreeAdapter  # noqa: E402

pytestmark = pytest.mark.jax


class NormalizerStatistics(nnx.Variable):
    """Running observation statistics, as in the seed's networks."""


class ActorCritic(nnx.Module):
    def __init__(self, obs: int, actions: int, seed: int) -> None:
        rngs = nnx.Rngs(params=seed, action=seed + 1)
        self.mean = NormalizerStatistics(jnp.zeros(obs))
        self.count = NormalizerStatistics(jnp.zeros((), jnp.int32))
        self.torso = nnx.Linear(obs, 8, rngs=rngs)
        self.policy = nnx.Linear(8, actions, rngs=rngs)
        self.value = nnx.Linear(8, 1, rngs=rngs)
        self.rngs = rngs  # RngKey + RngCount for action sampling

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = jnp.tanh(self.torso(obs - self.mean.get_value()))
        logits = self.policy(h)
        action = jax.random.categorical(self.rngs.action(), logits)
        return action, self.value(h)[..., 0]


@struct.dataclass
class TrainingState:
    networks: Any
    optimizer: Any
    network_states: Any
    env_states: Any
    rng_key: jax.Array
    steps_taken: int = struct.field(pytree_node=True, default=0)


def new_training_state(seed: int) -> TrainingState:
    networks = ActorCritic(4, 3, seed)
    optimizer = nnx.Optimizer(networks, optax.adam(1e-2), wrt=nnx.Param)
    key = jax.random.key(seed)
    env_key, rng_key = jax.random.split(key)
    env_states = {"obs": jnp.zeros((2, 4)), "t": jnp.zeros(2, jnp.int32), "key": jax.random.split(env_key, 2),
                  "done": jnp.zeros(2, bool)}
    return TrainingState(networks, optimizer, {"carry": jnp.zeros((2, 8))}, env_states, rng_key, 0)


@nnx.jit
def _update(networks: ActorCritic, optimizer: nnx.Optimizer, obs: jax.Array) -> jax.Array:
    def loss(model: ActorCritic) -> jax.Array:
        action, value = model(obs)
        return jnp.mean(value**2) + 0.01 * jnp.mean(action)

    grads = nnx.grad(loss)(networks)
    optimizer.update(networks, grads)
    networks.mean.set_value(0.9 * networks.mean.get_value() + 0.1 * obs.mean(0))
    networks.count.set_value(networks.count.get_value() + 1)
    return networks(obs)[0]


def train(state: TrainingState, steps: int) -> tuple[TrainingState, list[np.ndarray]]:
    actions = []
    env, key = state.env_states, state.rng_key
    for _ in range(steps):
        key, obs_key = jax.random.split(key)
        step_keys = jax.vmap(jax.random.split)(env["key"])
        obs = jax.random.normal(obs_key, (2, 4)) + jax.vmap(lambda k: jax.random.normal(k, (4,)))(step_keys[:, 1])
        actions.append(np.asarray(_update(state.networks, state.optimizer, obs)))
        env = {"obs": obs, "t": env["t"] + 1, "key": step_keys[:, 0], "done": env["t"] % 2 == 1}
    carry = {"carry": state.network_states["carry"] + 1}
    return state.replace(env_states=env, rng_key=key, network_states=carry,
                         steps_taken=state.steps_taken + steps), actions


def _assert_identical(a: Any, b: Any) -> None:
    def leaves(tree: Any) -> list[Any]:
        out = []
        for leaf in jax.tree_util.tree_leaves(nnx.to_pure_dict(nnx.state(tree)) if isinstance(tree, nnx.Pytree)
                                              else tree):
            if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                out.append((str(leaf.dtype), np.asarray(jax.random.key_data(leaf)).tobytes()))
            elif isinstance(leaf, jax.Array):
                out.append((str(leaf.dtype), leaf.shape, np.asarray(leaf).tobytes()))
            else:
                out.append(leaf)
        return out

    assert leaves(a) == leaves(b)


def _compare_states(restored: TrainingState, original: TrainingState) -> None:
    _assert_identical(restored.networks, original.networks)
    _assert_identical(restored.optimizer, original.optimizer)
    _assert_identical(restored.network_states, original.network_states)
    _assert_identical(restored.env_states, original.env_states)
    _assert_identical(restored.rng_key, original.rng_key)
    assert restored.steps_taken == original.steps_taken


def _no_pickle(path: Path) -> None:
    with open_checkpoint(path) as reader:
        for record in reader.components.values():
            assert set(record.files) <= {"tree.msgpack", "data.bin", "value.json"}


@pytest.fixture(scope="module")
def trained() -> TrainingState:
    state, _ = train(new_training_state(0), 2)
    return state


@pytest.mark.slow(seconds=12)  # NNX training compiled
def test_training_state_fields_as_components(tmp_path: Path, trained: TrainingState) -> None:
    def checkpoint(state: TrainingState) -> Checkpoint:
        return Checkpoint(networks=state.networks, optimizer=state.optimizer,
                          network_states=state.network_states, env_states=state.env_states,
                          rng_key=state.rng_key, steps_taken={"steps_taken": state.steps_taken})

    path = checkpoint(trained).save(tmp_path / "c")
    _no_pickle(path)
    target = new_training_state(5)
    result = checkpoint(target).load(path)
    restored = target.replace(env_states=result.values["env_states"], rng_key=result.values["rng_key"],
                              network_states=result.values["network_states"],
                              steps_taken=result.values["steps_taken"]["steps_taken"])
    assert jax.random.key_impl(restored.env_states["key"]) == jax.random.key_impl(trained.env_states["key"])
    _compare_states(restored, trained)

    continued, expected_actions = train(trained, 2)
    resumed, actions = train(restored, 2)
    for a, b in zip(actions, expected_actions, strict=True):
        np.testing.assert_array_equal(a, b)
    _compare_states(resumed, continued)


def test_whole_training_state_as_one_component(tmp_path: Path, trained: TrainingState) -> None:
    path = Checkpoint().register("training_state", trained, adapter=PytreeAdapter()).save(tmp_path / "c")
    _no_pickle(path)
    target = new_training_state(7)
    result = Checkpoint().register("training_state", target, adapter=PytreeAdapter()).load(path)
    restored = result.values["training_state"]
    assert type(restored) is TrainingState and restored.networks is target.networks  # NNX objects updated in place
    _compare_states(restored, trained)
