"""DDPG: Ornstein-Uhlenbeck exploration and target networks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

import rlblocks
from rlblocks.contracts import Batch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)


def test_ou_exploration_is_correlated_across_steps() -> None:
    policy = rlblocks.make_policy("ddpg", OBS, ACT, exploration="ou", exploration_sigma=0.3)
    policy.seed(0)
    zeros = np.zeros((1, 1), np.float32)
    xs = np.array([policy.exploration_noise(zeros, Batch())[0, 0] for _ in range(5_000)])
    assert np.corrcoef(xs[:-1], xs[1:])[0, 1] > 0.9


def test_target_value_uses_target_actor_and_critic() -> None:
    policy = rlblocks.make_policy("ddpg", OBS, ACT)
    obs = torch.randn(5, 3)
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.add_(1.0)  # the online actor drifts; the target actor has not followed yet
    expected = policy.critic_target(obs, policy.actor_target(obs))[0]
    torch.testing.assert_close(policy.target_value(obs), expected)
    assert not torch.allclose(policy.actor(obs), policy.actor_target(obs))
