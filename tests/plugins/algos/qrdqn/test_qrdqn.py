"""QR-DQN: target quantiles, the quantile Huber loss, acting on the mean, checkpoints, and
training to CartPole's threshold."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.run import load_checkpoint, save_checkpoint
from rlblocks_algo_qrdqn.config import QRDQNConfig
from rlblocks_algo_qrdqn.qrdqn import QRDQNPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def constant_policy(quantiles: np.ndarray, **cfg) -> QRDQNPolicy:
    """A policy whose online and target networks output ``quantiles [A, N]`` for every
    observation (all weights zero, the last bias set)."""
    policy = QRDQNPolicy(OBS, ACT, QRDQNConfig(num_quantiles=quantiles.shape[1], **cfg))
    for net in (policy.model, policy.target_model):
        with torch.no_grad():
            for p in net.parameters():
                p.zero_()
            last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.bias.copy_(torch.as_tensor(quantiles, dtype=torch.float32).flatten())
    return policy


# action 1 has the larger mean; its quantiles are ascending
QUANTILES = np.array([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 7.0, 12.0]])


@pytest.mark.parametrize("n_step", [1, 3])
def test_target_quantiles_bootstrap_the_greedy_action_and_stop_at_terminal(
    n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    buf = episode_buffer([(1.0, False, False), (2.0, False, False), (4.0, True, False)])
    policy = constant_policy(QUANTILES, gamma=gamma, n_step=n_step, double=False)
    idx = np.array([0, 1, 2])
    target = policy.target_quantiles(policy.process_fn(buf[idx], buf, idx))
    assert target.shape == (3, 4)
    rews = [1.0, 2.0, 4.0]
    for t in range(3):
        k = min(n_step, 3 - t)
        g = sum(gamma**j * rews[t + j] for j in range(k))
        boot = 0.0 if t + k == 3 else gamma**k
        np.testing.assert_allclose(target[t].numpy(), g + boot * QUANTILES[1], rtol=1e-6)
    # the episode's last step only sees its reward: every target sample is the same
    assert torch.all(target[2] == 4.0)


def test_loss_is_the_quantile_huber_loss_at_the_midpoints_and_weights_apply(
    episode_buffer, quantile_huber_reference
) -> None:
    gamma, kappa = 0.9, 1.0
    buf = episode_buffer([(1.0, False, False), (-2.0, False, False), (0.5, True, False)])
    policy = constant_policy(QUANTILES, gamma=gamma, n_step=1, double=False, kappa=kappa)
    idx = np.array([0, 1, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    batch.weight = np.array([0.5, 1.0, 2.0], np.float32)
    stats = policy.learn(batch)
    taus = (np.arange(4) + 0.5) / 4
    expected = []
    for t, (rew, terminal) in enumerate([(1.0, False), (-2.0, False), (0.5, True)]):
        target = rew + (0.0 if terminal else gamma) * QUANTILES[1]
        expected.append(quantile_huber_reference(QUANTILES[t % 2], target, taus, kappa))
    np.testing.assert_allclose(batch.td_error.numpy(), expected, rtol=1e-5)
    weighted = float(np.mean(np.array(expected) * batch.weight))
    assert float(stats["loss"]) == pytest.approx(weighted, rel=1e-5)


def test_acting_uses_the_mean_of_the_quantiles() -> None:
    policy = QRDQNPolicy(OBS, gym.spaces.Discrete(3), QRDQNConfig(num_quantiles=7))
    policy.eval()
    obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
    out = policy(Batch(obs=obs))
    with torch.no_grad():
        z = policy.model(torch.as_tensor(obs))
    assert z.shape == (5, 3, 7)
    torch.testing.assert_close(out.logits, z.mean(dim=2))
    np.testing.assert_array_equal(out.act, z.mean(dim=2).argmax(dim=1).numpy())


def test_learning_fits_the_return_distribution_on_a_fixed_batch(episode_buffer) -> None:
    # gamma=0: the target is the reward itself, so every quantile must converge to it
    torch.manual_seed(0)
    cfg = QRDQNConfig(lr=1e-2, gamma=0.0, n_step=1, tau=None, target_update_interval=0)
    policy = QRDQNPolicy(OBS, ACT, cfg)
    buf = episode_buffer([(1.0, False, False), (0.0, False, False), (2.0, True, False)])
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(300)]
    assert losses[-1] < 0.05 * losses[0]
    with torch.no_grad():
        q = policy.q_values(torch.tensor([[0.0, 0, 0], [2.0, 0, 0]]), policy.model)
    assert float(q[0, 0]) == pytest.approx(1.0, abs=0.1)
    assert float(q[1, 0]) == pytest.approx(2.0, abs=0.1)


def test_checkpoint_round_trip_gives_identical_q_values(tmp_path: Path, random_buffer) -> None:
    torch.manual_seed(0)
    policy = QRDQNPolicy(OBS, ACT, QRDQNConfig(num_quantiles=8))
    buf = random_buffer(ACT)
    for _ in range(5):
        policy.update(16, buf)
    save_checkpoint(tmp_path / "c.pt", {"p": policy.state_dict(), "x": policy.extra_state()})
    loaded = load_checkpoint(tmp_path / "c.pt")
    torch.manual_seed(1)
    fresh = QRDQNPolicy(OBS, ACT, QRDQNConfig(num_quantiles=8))
    fresh.load_state_dict(loaded["p"])
    fresh.load_extra_state(loaded["x"])
    obs = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (6, 3)), dtype=torch.float32)
    with torch.no_grad():
        for a, b in [(policy.model, fresh.model), (policy.target_model, fresh.target_model)]:
            torch.testing.assert_close(policy.q_values(obs, a), fresh.q_values(obs, b))
    assert fresh.gradient_steps == policy.gradient_steps == 5


@pytest.mark.slow
def test_qrdqn_solves_cartpole_with_default_settings(tmp_path: Path) -> None:
    """The README's first command: `rlblocks train qrdqn` reaches 475 over 100 test episodes."""
    result = rlblocks.train("qrdqn", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
