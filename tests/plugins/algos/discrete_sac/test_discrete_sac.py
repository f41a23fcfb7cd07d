"""Discrete SAC: exact soft targets over actions, Discrete.start, and CartPole from scratch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)


def test_target_is_the_policy_weighted_soft_value() -> None:
    policy = rlblocks.make_policy("discrete-sac", OBS, gym.spaces.Discrete(3), alpha=0.2)
    obs = torch.randn(5, 3)
    dist = policy.actor(obs)
    q = policy.critic_target(obs).min(dim=0).values
    expected = (dist.probs * (q - 0.2 * dist.logits)).sum(-1)
    torch.testing.assert_close(policy.target_value(obs), expected)


def test_actions_follow_the_spaces_start() -> None:
    space = gym.spaces.Discrete(3, start=5)
    policy = rlblocks.make_policy("discrete-sac", OBS, space)
    act = policy(Batch(obs=np.zeros((50, 3), np.float32))).act
    assert set(act.tolist()) <= {0, 1, 2}  # indices, stored and learned as they are
    assert set(policy.map_action(act).tolist()) <= {5, 6, 7}  # what the env gets
    buf = ReplayBuffer(16)
    for a in (0, 1, 2, 0):
        buf.add(
            Batch(obs=np.zeros(3, np.float32), act=a, rew=1.0, terminated=False, truncated=False,
                  obs_next=np.zeros(3, np.float32))
        )  # fmt: skip
    assert np.isfinite(float(policy.update(4, buf)["loss/critic"]))


def test_the_default_fixed_alpha_is_the_configured_value_exactly() -> None:
    policy = rlblocks.make_policy("discrete-sac", OBS, gym.spaces.Discrete(3))
    assert not policy.config.auto_alpha and "alpha" not in policy.optim_steps
    # float32's 0.05 itself, not exp(log(0.05)), a rounding off it
    assert policy.alpha.item() == torch.tensor(policy.config.alpha).item()


def test_auto_alpha_falls_when_entropy_is_above_target(random_buffer) -> None:
    policy = rlblocks.make_policy(
        "discrete-sac", OBS, gym.spaces.Discrete(4), auto_alpha=True, target_entropy_ratio=0.1,
        alpha_lr=1e-2,
    )  # fmt: skip
    buf = random_buffer(gym.spaces.Discrete(4), n=32)
    start = float(policy.alpha)
    for _ in range(10):
        policy.update(16, buf)
    assert float(policy.alpha) < start  # a near-uniform policy is far above 10% of max entropy


def test_auto_alpha_aims_at_the_entropy_the_legal_actions_allow() -> None:
    """Under an action mask the target is the ratio of log(legal actions), per state: with 2
    of 10 actions legal a near-uniform policy over them (entropy log 2 = 0.69) is above half of
    log 2, so alpha falls; a target of half of log 10 (1.15), out of reach, would raise it."""
    space = gym.spaces.Dict({
        "observation": OBS,
        "action_mask": gym.spaces.Box(0, 1, (10,), dtype=np.int8),
    })  # fmt: skip
    policy = rlblocks.make_policy(
        "discrete-sac", space, gym.spaces.Discrete(10), auto_alpha=True,
        target_entropy_ratio=0.5, alpha_lr=1e-2,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(64)
    for _ in range(64):
        mask = np.zeros(10, np.int8)
        mask[rng.choice(10, 2, replace=False)] = 1
        obs = {"observation": rng.uniform(-1, 1, 3).astype(np.float32), "action_mask": mask}
        buf.add(Batch(obs=obs, act=int(rng.choice(np.flatnonzero(mask))), rew=0.0,
                      terminated=False, truncated=False, obs_next=obs))  # fmt: skip
    start = float(policy.alpha)
    for _ in range(10):
        stats = policy.update(16, buf)
    assert float(stats["entropy"]) < np.log(2) + 1e-4  # only the legal actions carry mass
    assert float(policy.alpha) < start


@pytest.mark.slow
def test_discrete_sac_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = rlblocks.train(
        "discrete-sac", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved, result
    assert result.best_test_return >= 475.0
