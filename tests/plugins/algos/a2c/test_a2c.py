"""A2C: one gradient step per minibatch of a fresh rollout, the tanh-squashed Gaussian mean, and
training to CartPole's and Pendulum's thresholds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer
from rlblocks_algo_a2c.a2c import A2CPolicy
from rlblocks_algo_a2c.config import A2CConfig

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)


def rollout(policy: A2CPolicy, n: int = 20) -> ReplayBuffer:
    buf = ReplayBuffer(n)
    rng = np.random.default_rng(0)
    for t in range(n):
        obs = rng.uniform(-1, 1, (1, 3)).astype(np.float32)
        act = policy(Batch(obs=obs)).act
        buf.add(
            Batch(obs=obs, act=act, rew=[1.0], terminated=[t == n - 1], truncated=[False],
                  obs_next=obs),
            env_ids=[0],
        )
    return buf


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
@pytest.mark.parametrize(
    "action_space", [gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)]
)
def test_one_gradient_step_per_minibatch(optimizer: str, action_space: gym.Space) -> None:
    torch.manual_seed(0)
    policy = A2CPolicy(OBS, action_space, A2CConfig(optimizer=optimizer))
    stats = policy.update(0, rollout(policy), batch_size=5, repeat=2)
    assert stats["gradient_steps"] == 8
    assert np.isfinite(stats["loss"])


def test_critic_moves_towards_the_returns() -> None:
    torch.manual_seed(0)
    policy = A2CPolicy(OBS, gym.spaces.Discrete(2), A2CConfig(lr=1e-2, gae_lambda=1.0))
    buf = rollout(policy)
    first = policy.update(0, buf, batch_size=100, repeat=1)["loss/vf"]
    for _ in range(30):
        last = policy.update(0, buf, batch_size=100, repeat=1)["loss/vf"]
    assert last < 0.5 * first


@pytest.mark.parametrize("tanh_mean", [False, True])
def test_tanh_mean_squashes_the_gaussian_mean_into_the_unit_box(tanh_mean: bool) -> None:
    torch.manual_seed(0)
    box = gym.spaces.Box(-2.0, 2.0, (2,), dtype=np.float32)
    policy = A2CPolicy(OBS, box, A2CConfig(tanh_mean=tanh_mean))
    last = [m for m in policy.actor.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.bias.fill_(3.0)
    feats = policy.encode(np.zeros((4, 3), dtype=np.float32))
    dist = policy.dist(feats)
    expected = torch.tanh(torch.tensor(3.0)) if tanh_mean else torch.tensor(3.0)
    torch.testing.assert_close(dist.mean, torch.full((4, 2), float(expected)))
    policy.eval()  # the greedy test action is the (squashed) mean, in network units
    act = policy(Batch(obs=np.zeros((4, 3), dtype=np.float32))).act
    np.testing.assert_allclose(act, float(expected), rtol=1e-6)
    # the gradient reaches the actor through the tanh
    policy.train()
    stats = policy.update(0, rollout(policy), batch_size=5, repeat=1)
    assert np.isfinite(stats["loss"]) and last.bias.grad is not None


def test_tanh_mean_leaves_discrete_actions_alone() -> None:
    torch.manual_seed(0)
    policy = A2CPolicy(OBS, gym.spaces.Discrete(3), A2CConfig(tanh_mean=True))
    feats = policy.encode(np.zeros((2, 3), dtype=np.float32))
    torch.testing.assert_close(policy.dist(feats).logits, policy.actor(feats).logits)


@pytest.mark.slow
def test_a2c_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = rlblocks.train(
        "a2c", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved and result.best_test_return >= 475.0, result


@pytest.mark.slow
def test_a2c_reaches_minus_250_on_pendulum_with_its_pendulum_defaults(tmp_path) -> None:
    result = rlblocks.train(
        "a2c",
        env="Pendulum-v1",
        seed=0,
        stop_reward=-250.0,
        loggers=[],
        progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.solved and result.best_test_return >= -250.0, result
