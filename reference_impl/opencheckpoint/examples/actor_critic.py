"""A tiny torch actor-critic (two small MLPs) and one A2C update on :class:`~.control.CartPole`.

Deterministic on CPU: :func:`make_deterministic` fixes the thread count and
turns on torch's deterministic algorithms; actions are sampled from torch's
global generator, so resuming needs :class:`~opencheckpoint.run.rng.GlobalRNGState`.

>>> _ = torch.manual_seed(0)
>>> model = ActorCritic(hidden=8)
>>> logits, value = model(torch.zeros(3, 4))
>>> tuple(logits.shape), tuple(value.shape)
((3, 2), (3,))
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .control import CartPole


def make_deterministic(seed: int) -> None:
    """Seed every global generator; make torch's CPU kernels deterministic and single-threaded.

    Python's and NumPy's global streams are seeded too, although the example
    does not draw from them, so two runs hold identical global RNG state.
    """
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # reductions split across threads could change the bits
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, outputs))


class ActorCritic(nn.Module):
    """``actor``: observation -> action logits; ``critic``: observation -> state value."""

    def __init__(self, obs_dim: int = CartPole.obs_dim, num_actions: int = CartPole.num_actions,
                 hidden: int = 32) -> None:
        super().__init__()
        self.actor = mlp(obs_dim, hidden, num_actions)
        self.critic = mlp(obs_dim, hidden, 1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.actor(obs), self.critic(obs).squeeze(-1)


@dataclass
class A2CConfig:
    rollout: int = 16
    gamma: float = 0.99
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5


_DEFAULT_CONFIG = A2CConfig()  # one shared default, as the default argument always was


def a2c_update(model: ActorCritic, optimizer: torch.optim.Optimizer, env: CartPole,
               config: A2CConfig = _DEFAULT_CONFIG) -> float:
    """Collect ``config.rollout`` steps from every env, take one A2C gradient step; return the loss."""
    obs_list, actions, rewards, dones = [], [], [], []
    obs = env.observe()
    for _ in range(config.rollout):
        with torch.no_grad():
            logits, _ = model(torch.from_numpy(obs))
        action = torch.multinomial(torch.softmax(logits, -1), 1).squeeze(-1)
        obs_list.append(obs)
        actions.append(action)
        obs, reward, done = env.step(action.numpy())
        rewards.append(reward)
        dones.append(done)
    with torch.no_grad():
        _, bootstrap = model(torch.from_numpy(obs))
    returns = np.zeros((config.rollout, len(obs)), dtype=np.float32)
    running = bootstrap.numpy().astype(np.float32)
    for t in reversed(range(config.rollout)):
        running = (rewards[t] + config.gamma * running * (1.0 - dones[t])).astype(np.float32)
        returns[t] = running
    logits, values = model(torch.from_numpy(np.concatenate(obs_list)))
    target = torch.from_numpy(returns.reshape(-1))
    log_probs = torch.log_softmax(logits, -1)
    taken = log_probs.gather(1, torch.cat(actions).unsqueeze(1)).squeeze(1)
    advantage = (target - values).detach()
    entropy = -(log_probs.exp() * log_probs).sum(-1).mean()
    loss = (-(taken * advantage).mean() + config.value_coef * (target - values).pow(2).mean()
            - config.entropy_coef * entropy)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
    optimizer.step()
    return float(loss.detach())
