"""A seeded, vectorized CartPole (Barto, Sutton & Anderson 1983 dynamics) in NumPy.

Its whole state — poles, step counters, running returns and the NumPy
generator that draws resets — is in :meth:`CartPole.state_dict`, so a
checkpoint resumes the environment exactly.

>>> env = CartPole(num_envs=2, seed=0)
>>> obs = env.observe()
>>> obs.shape, obs.dtype.name
((2, 4), 'float32')
>>> obs, reward, done = env.step(np.array([0, 1]))
>>> reward.tolist(), done.tolist()
([1.0, 1.0], [False, False])
"""

from __future__ import annotations

from typing import Any

import numpy as np


class CartPole:
    """``num_envs`` independent cart-poles; an episode ends when the pole falls, the cart leaves, or at
    ``max_steps``."""

    gravity, cart_mass, pole_mass, half_length, force, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit, x_limit = 12 * 2 * np.pi / 360, 2.4
    obs_dim, num_actions = 4, 2

    def __init__(self, num_envs: int = 8, seed: int = 0, max_steps: int = 200) -> None:
        self.rng = np.random.default_rng(seed)
        self.max_steps = max_steps
        self.state = np.zeros((num_envs, 4))
        self.steps = np.zeros(num_envs, dtype=np.int64)
        self.returns = np.zeros(num_envs)
        #: returns of finished episodes since the last :meth:`pop_finished`
        self.finished: list[float] = []
        self._reset(np.ones(num_envs, dtype=bool))

    def _reset(self, mask: np.ndarray) -> None:
        self.state[mask] = self.rng.uniform(-0.05, 0.05, size=(int(mask.sum()), 4))
        self.steps[mask] = 0
        self.returns[mask] = 0.0

    def observe(self) -> np.ndarray:
        return self.state.astype(np.float32)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Apply actions (0: push left, 1: push right); return (next obs, reward, done). Done envs reset."""
        x, x_dot, theta, theta_dot = self.state.T
        force = np.where(action == 1, self.force, -self.force)
        total_mass = self.cart_mass + self.pole_mass
        pole_moment = self.pole_mass * self.half_length
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + pole_moment * theta_dot**2 * sin) / total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.half_length * (4.0 / 3.0 - self.pole_mass * cos**2 / total_mass))
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        self.state = np.stack([x + self.tau * x_dot, x_dot + self.tau * x_acc,
                               theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc], axis=1)
        self.steps += 1
        reward = np.ones(len(action))
        self.returns += reward
        fell = (np.abs(self.state[:, 0]) > self.x_limit) | (np.abs(self.state[:, 2]) > self.theta_limit)
        done = fell | (self.steps >= self.max_steps)
        self.finished.extend(self.returns[done].tolist())
        self._reset(done)
        return self.observe(), reward, done

    def pop_finished(self) -> list[float]:
        finished, self.finished = self.finished, []
        return finished

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state, "steps": self.steps, "returns": self.returns,
                "finished": list(self.finished), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if np.shape(state["state"]) != self.state.shape:
            raise ValueError(f"stored {np.shape(state['state'])[0]} envs, this CartPole has {len(self.state)}")
        self.state = np.array(state["state"], dtype=np.float64)
        self.steps = np.array(state["steps"], dtype=np.int64)
        self.returns = np.array(state["returns"], dtype=np.float64)
        self.finished = [float(r) for r in state["finished"]]
        self.rng.bit_generator.state = state["rng"]
