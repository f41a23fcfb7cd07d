"""REDQ: random target subsets, the ensemble-mean actor, and Pendulum from scratch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)


def test_target_is_the_min_of_a_random_subset_of_target_critics() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("redq", OBS, ACT, ensemble_size=5, subset_size=2, alpha=0.1)
    obs = torch.randn(4, 3)
    torch.manual_seed(3)
    value = policy.target_value(obs)
    torch.manual_seed(3)
    act, logp = policy.actor(obs)
    q = policy.critic_target(obs, act)
    subset = torch.randperm(5)[:2]
    torch.testing.assert_close(value, q[subset].min(dim=0).values - 0.1 * logp)
    # different draws pick different subsets: the value is not always the same minimum
    values = {tuple(policy.target_value(obs).round(decimals=5).tolist()) for _ in range(20)}
    assert len(values) > 1


def test_subset_larger_than_the_ensemble_is_a_config_error() -> None:
    with pytest.raises(rlblocks.ConfigError, match="subset_size"):
        rlblocks.make_policy("redq", OBS, ACT, ensemble_size=3, subset_size=4)


@pytest.mark.slow
def test_redq_solves_pendulum_with_default_settings(tmp_path) -> None:
    result = rlblocks.train(
        "redq", seed=0, stop_reward=-250, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved, result


def test_a_fixed_alpha_is_the_configured_value_exactly() -> None:
    policy = rlblocks.make_policy("redq", OBS, ACT, auto_alpha=False, alpha=0.2)
    assert policy.alpha.item() == torch.tensor(0.2).item()  # not exp(log(0.2)), a rounding off
    assert "alpha" not in policy.optim_steps
