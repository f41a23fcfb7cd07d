"""IQN: sampled fractions, target quantiles, the quantile Huber loss, acting on the mean of K
quantiles, checkpoints, and training to CartPole's threshold."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.run import load_checkpoint, save_checkpoint
from rlblocks_algo_iqn.config import IQNConfig
from rlblocks_algo_iqn.iqn import IQNPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def constant_policy(q: tuple[float, float], **cfg) -> IQNPolicy:
    """A policy whose online and target networks give quantile ``q[a]`` for action ``a`` at every
    fraction and observation (all weights zero, the last bias set)."""
    policy = IQNPolicy(OBS, ACT, IQNConfig(**cfg))
    for net in (policy.model, policy.target_model):
        with torch.no_grad():
            for p in net.parameters():
                p.zero_()
            last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.bias.copy_(torch.tensor(q))
    return policy


@pytest.mark.parametrize("n_step", [1, 3])
def test_target_quantiles_bootstrap_the_greedy_action_and_stop_at_terminal(
    n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    buf = episode_buffer([(1.0, False, False), (2.0, False, False), (4.0, True, False)])
    policy = constant_policy((3.0, 10.0), gamma=gamma, n_step=n_step, num_tau_prime_samples=5)
    idx = np.array([0, 1, 2])
    target = policy.target_quantiles(policy.process_fn(buf[idx], buf, idx))
    assert target.shape == (3, 5)
    rews = [1.0, 2.0, 4.0]
    for t in range(3):
        k = min(n_step, 3 - t)
        g = sum(gamma**j * rews[t + j] for j in range(k))
        boot = 0.0 if t + k == 3 else gamma**k * 10.0
        np.testing.assert_allclose(target[t].numpy(), np.full(5, g + boot), rtol=1e-6)


def test_loss_is_the_quantile_huber_loss_at_the_sampled_fractions(
    monkeypatch, episode_buffer, quantile_huber_reference
) -> None:
    gamma, kappa = 0.9, 1.0
    buf = episode_buffer([(1.0, False, False), (-2.0, False, False), (0.5, True, False)])
    policy = constant_policy(
        (0.0, 2.0), gamma=gamma, n_step=1, kappa=kappa, num_tau_samples=3, num_tau_prime_samples=2
    )
    drawn: list[torch.Tensor] = []

    def fixed_taus(batch_size: int, num: int) -> torch.Tensor:
        taus = torch.linspace(0.1, 0.9, num).expand(batch_size, -1) + 0.01 * len(drawn)
        drawn.append(taus)
        return taus

    monkeypatch.setattr(policy, "sample_taus", fixed_taus)
    idx = np.array([0, 1, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    batch.weight = np.array([2.0, 1.0, 0.5], np.float32)
    stats = policy.learn(batch)
    online_taus = [t for t in drawn if t.shape[1] == 3]
    assert len(online_taus) == 1  # the online quantiles in the loss use N fractions
    taus = online_taus[0][0].numpy()
    expected = []
    for t, (rew, terminal) in enumerate([(1.0, False), (-2.0, False), (0.5, True)]):
        target = np.full(2, rew + (0.0 if terminal else gamma * 2.0))
        pred = np.full(3, [0.0, 2.0][t % 2])
        expected.append(quantile_huber_reference(pred, target, taus, kappa))
    np.testing.assert_allclose(batch.td_error.numpy(), expected, rtol=1e-5)
    assert float(stats["loss"]) == pytest.approx(np.mean(np.array(expected) * batch.weight))


def test_fractions_come_from_torchs_global_generator_on_the_policy_device() -> None:
    policy = IQNPolicy(OBS, ACT, IQNConfig(num_quantile_samples=6))
    torch.manual_seed(3)
    a = policy.sample_taus(4, 6)
    torch.manual_seed(3)
    b = torch.rand(4, 6)
    torch.testing.assert_close(a, b)
    assert a.device == policy.device and float(a.min()) >= 0.0 and float(a.max()) < 1.0


def test_acting_averages_k_sampled_quantiles_while_training_and_midpoints_while_testing() -> None:
    k = 5
    policy = IQNPolicy(OBS, gym.spaces.Discrete(3), IQNConfig(num_quantile_samples=k))
    obs = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (4, 3)), dtype=torch.float32)
    policy.train()
    torch.manual_seed(7)
    q_train = policy.q_values(obs, policy.model)
    torch.manual_seed(7)
    with torch.no_grad():
        expected = policy.model(obs, torch.rand(4, k)).mean(dim=1)
    torch.testing.assert_close(q_train.detach(), expected)

    policy.eval()
    out = policy(Batch(obs=obs.numpy()))
    midpoints = ((torch.arange(k) + 0.5) / k).expand(4, -1)
    with torch.no_grad():
        expected = policy.model(obs, midpoints).mean(dim=1)
    assert expected.shape == (4, 3)
    torch.testing.assert_close(out.logits.detach(), expected)
    np.testing.assert_array_equal(out.act, expected.argmax(dim=1).numpy())
    again = policy(Batch(obs=obs.numpy()))
    torch.testing.assert_close(again.logits, out.logits)  # testing is deterministic


def test_learning_fits_the_return_distribution_on_a_fixed_batch(episode_buffer) -> None:
    # gamma=0: the target is the reward itself, so every quantile must converge to it
    torch.manual_seed(0)
    cfg = IQNConfig(lr=1e-2, gamma=0.0, n_step=1, tau=None, target_update_interval=0)
    policy = IQNPolicy(OBS, ACT, cfg)
    buf = episode_buffer([(1.0, False, False), (0.0, False, False), (2.0, True, False)])
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(300)]
    assert np.mean(losses[-10:]) < 0.05 * np.mean(losses[:10])
    policy.eval()
    with torch.no_grad():
        q = policy.q_values(torch.tensor([[0.0, 0, 0], [2.0, 0, 0]]), policy.model)
    assert float(q[0, 0]) == pytest.approx(1.0, abs=0.1)
    assert float(q[1, 0]) == pytest.approx(2.0, abs=0.1)


def test_checkpoint_round_trip_gives_identical_q_values(tmp_path: Path, random_buffer) -> None:
    torch.manual_seed(0)
    policy = IQNPolicy(OBS, ACT, IQNConfig(num_quantile_samples=8))
    buf = random_buffer(ACT)
    for _ in range(5):
        policy.update(16, buf)
    save_checkpoint(tmp_path / "c.pt", {"p": policy.state_dict(), "x": policy.extra_state()})
    loaded = load_checkpoint(tmp_path / "c.pt")
    torch.manual_seed(1)
    fresh = IQNPolicy(OBS, ACT, IQNConfig(num_quantile_samples=8))
    fresh.load_state_dict(loaded["p"])
    fresh.load_extra_state(loaded["x"])
    policy.eval()
    fresh.eval()
    obs = torch.as_tensor(np.random.default_rng(1).uniform(-1, 1, (6, 3)), dtype=torch.float32)
    with torch.no_grad():
        for a, b in [(policy.model, fresh.model), (policy.target_model, fresh.target_model)]:
            torch.testing.assert_close(policy.q_values(obs, a), fresh.q_values(obs, b))
    assert fresh.gradient_steps == policy.gradient_steps == 5


@pytest.mark.slow
def test_iqn_solves_cartpole_with_default_settings(tmp_path: Path) -> None:
    """The README's first command: `rlblocks train iqn` reaches 475 over 100 test episodes."""
    result = rlblocks.train("iqn", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
