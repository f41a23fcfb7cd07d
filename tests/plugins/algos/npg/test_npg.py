"""NPG: conjugate gradient and Fisher-vector products, and training to CartPole's threshold."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo import (
    Categorical,
    conjugate_gradient,
    fisher_vector_product,
    get_flat_params,
    set_flat_params,
)


def test_conjugate_gradient_solves_a_positive_definite_system() -> None:
    torch.manual_seed(0)
    m = torch.randn(6, 6, dtype=torch.float64)
    a = m @ m.T + 6 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iters=20)
    torch.testing.assert_close(a @ x, b)


def test_fisher_vector_product_equals_the_explicit_fisher_matrix() -> None:
    """For a categorical with logits theta, the Hessian of KL(p_old || p_theta) at theta_old is
    diag(p) - p p^T."""
    theta = torch.tensor([0.3, -0.2, 0.5], requires_grad=True)
    old = Categorical(theta.detach().unsqueeze(0))
    kl = old.kl(Categorical(theta.unsqueeze(0))).mean()
    fvp = fisher_vector_product(kl, [theta], damping=0.0)
    p = torch.softmax(theta.detach(), 0)
    fisher = torch.diag(p) - torch.outer(p, p)
    v = torch.tensor([1.0, 2.0, -1.0])
    torch.testing.assert_close(fvp(v), fisher @ v)


def test_flat_params_round_trip() -> None:
    net = torch.nn.Linear(3, 2)
    params = list(net.parameters())
    flat = get_flat_params(params)
    set_flat_params(params, flat * 0 + 1.5)
    assert all(torch.all(p == 1.5) for p in params)
    assert flat.numel() == 8


@pytest.mark.slow
def test_npg_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = rlblocks.train("npg", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved and result.best_test_return >= 475.0, result


def test_npg_handles_box_actions() -> None:
    from rlblocks.contracts import Batch
    from rlblocks.replay import ReplayBuffer
    from rlblocks_algo_npg.npg import NPGPolicy

    obs_space = gym.spaces.Box(-1, 1, (2,), dtype=np.float32)
    policy = NPGPolicy(obs_space, gym.spaces.Box(-1, 1, (1,), dtype=np.float32))
    buf = ReplayBuffer(16)
    for t in range(16):
        obs = np.full((1, 2), t / 16, np.float32)
        buf.add(Batch(obs=obs, act=policy(Batch(obs=obs)).act, rew=[float(t % 3)],
                      terminated=[False], truncated=[t == 15], obs_next=obs), env_ids=[0])
    before = get_flat_params(list(policy.actor.parameters()))
    stats = policy.update(0, buf, batch_size=100, repeat=1)
    assert not torch.equal(before, get_flat_params(list(policy.actor.parameters())))
    assert np.isfinite(stats["kl"])


@pytest.mark.slow
def test_npg_reaches_minus_250_on_pendulum_with_its_pendulum_defaults(tmp_path) -> None:
    result = rlblocks.train(
        "npg", env="Pendulum-v1", seed=0, stop_reward=-250.0, loggers=[], progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.solved and result.best_test_return >= -250.0, result
