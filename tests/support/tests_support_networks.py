"""Networks a user brings, importable by path (``algo.encoder`` in a config) for the tests of
your own networks (tests/integration/test_user_networks.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn


def small_encoder(
    observation_space: gym.Space, action_space: gym.Space, features: int = 32
) -> nn.Module:
    """A one-layer feature extractor of flat Box observations: ``[B, obs] -> [B, features]``."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(int(np.prod(observation_space.shape)), features), nn.ReLU()
    )


class Net(nn.Module):
    """A network in the thesis' style: ``forward(obs, state=None, info={}) -> (logits, state)``."""

    def __init__(self, state_shape: int, action_shape: int, hidden: int = 128) -> None:
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(state_shape, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, action_shape),
        )  # fmt: skip

    def forward(self, obs, state=None, info={}):  # noqa: B006 (the thesis' signature)
        obs = torch.as_tensor(obs, dtype=torch.float32)
        return self.model(obs.reshape(obs.shape[0], -1)), state


class QuantileNet(nn.Module):
    """An IQN quantile network of one's own: ``forward(obs [B, obs], taus [B, K]) -> [B, K, A]``
    (the observation's features times a cosine embedding of each fraction)."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: int = 64, cosines: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU())
        self.embed = nn.Sequential(nn.Linear(cosines, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, num_actions)
        self.register_buffer("freqs", torch.arange(1, cosines + 1, dtype=torch.float32) * np.pi)

    def forward(self, obs: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        x = self.features(obs.reshape(obs.shape[0], -1).float())  # [B, H]
        e = self.embed(torch.cos(taus.unsqueeze(-1) * self.freqs))  # [B, K, H]
        return self.head(x.unsqueeze(1) * e)  # [B, K, A]


def counting_dqn_class() -> type:
    """A subclass of DQN's policy that counts its gradient steps (``learned``), the way a user
    changes an algorithm by subclassing it."""
    from rlblocks_algo_dqn.dqn import DQNPolicy

    class CountingDQN(DQNPolicy):
        learned = 0

        def learn(self, batch, **kwargs):  # type: ignore[no-untyped-def]
            type(self).learned += 1
            return super().learn(batch, **kwargs)

    CountingDQN.__module__ = __name__
    CountingDQN.__qualname__ = "CountingDQN"
    return CountingDQN
