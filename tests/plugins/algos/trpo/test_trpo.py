"""TRPO: every accepted step keeps the KL bound, and training to CartPole's threshold."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks_algo_trpo.config import TRPOConfig
from rlblocks_algo_trpo.trpo import TRPOPolicy


@pytest.mark.parametrize("max_kl", [1e-3, 1e-2])
def test_accepted_steps_stay_within_max_kl(max_kl: float) -> None:
    torch.manual_seed(0)
    obs_space = gym.spaces.Box(-1, 1, (3,), dtype=np.float32)
    policy = TRPOPolicy(obs_space, gym.spaces.Discrete(3), config=TRPOConfig(max_kl=max_kl))
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(64)
    for t in range(64):
        obs = rng.uniform(-1, 1, (1, 3)).astype(np.float32)
        act = policy(Batch(obs=obs)).act
        buf.add(Batch(obs=obs, act=act, rew=[float(act[0] == 1)], terminated=[t % 8 == 7],
                      truncated=[False], obs_next=obs), env_ids=[0])
    stats = policy.update(0, buf, batch_size=100, repeat=1)
    assert stats["accepted"] == 1.0
    assert stats["kl"] <= max_kl * 1.0001


@pytest.mark.slow
def test_trpo_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = rlblocks.train("trpo", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved and result.best_test_return >= 475.0, result


@pytest.mark.slow
def test_trpo_reaches_minus_250_on_pendulum_with_its_pendulum_defaults(tmp_path) -> None:
    result = rlblocks.train(
        "trpo", env="Pendulum-v1", seed=0, stop_reward=-250.0, loggers=[], progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.solved and result.best_test_return >= -250.0, result
