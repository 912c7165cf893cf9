"""The Flax NNX twin of :class:`~.actor_critic.ActorCritic`, and loading torch weights into it.

Same layers, same activations; torch ``Linear.weight`` is [out, in], NNX
``Linear.kernel`` is [in, out]: :mod:`opencheckpoint.tools.interchange` transposes
(never casts) while mapping names.

>>> import numpy as np
>>> model = NNXActorCritic(rngs=nnx.Rngs(0))
>>> logits, value = model(np.zeros((3, 4), np.float32))
>>> logits.shape, value.shape
((3, 2), (3,))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import ArrayLike

from ..tools.interchange import torch_state_to_nnx

#: torch module prefix of :class:`~.actor_critic.ActorCritic` -> attribute path in :class:`NNXActorCritic`.
TORCH_TO_NNX = {f"{head}.{index}": f"{head}.{name}"
                for head in ("actor", "critic")
                for index, name in (("0", "hidden1"), ("2", "hidden2"), ("4", "out"))}


class NNXMLP(nnx.Module):
    """Linear -> tanh -> Linear -> tanh -> Linear, like :func:`~.actor_critic.mlp`."""

    def __init__(self, inputs: int, hidden: int, outputs: int, *, rngs: nnx.Rngs) -> None:
        self.hidden1 = nnx.Linear(inputs, hidden, rngs=rngs)
        self.hidden2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, outputs, rngs=rngs)

    def __call__(self, x: ArrayLike) -> jax.Array:
        # NumPy input too (the module doctest uses it); nnx.Linear would convert it the same way
        return self.out(jnp.tanh(self.hidden2(jnp.tanh(self.hidden1(jnp.asarray(x))))))


class NNXActorCritic(nnx.Module):
    """``actor``: observation -> action logits; ``critic``: observation -> state value."""

    def __init__(self, obs_dim: int = 4, num_actions: int = 2, hidden: int = 32, *, rngs: nnx.Rngs) -> None:
        self.actor = NNXMLP(obs_dim, hidden, num_actions, rngs=rngs)
        self.critic = NNXMLP(obs_dim, hidden, 1, rngs=rngs)

    def __call__(self, obs: ArrayLike) -> tuple[jax.Array, jax.Array]:
        return self.actor(obs), self.critic(obs)[..., 0]


def load_torch_policy(model: NNXActorCritic, torch_state: Mapping[str, Any]) -> None:
    """Copy a torch ``ActorCritic`` state dict (any framework's arrays) into ``model``, bit for bit."""
    params = torch_state_to_nnx(torch_state, TORCH_TO_NNX)
    state = nnx.state(model, nnx.Param)
    nnx.replace_by_pure_dict(state, params)
    nnx.update(model, state)
