"""DQN: targets, exploration schedule, options, and training to CartPole's threshold."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks_algo_dqn.config import DQNConfig
from rlblocks_algo_dqn.dqn import DQNPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def constant_q_policy(q_value: float, **cfg) -> DQNPolicy:
    policy = DQNPolicy(OBS, ACT, DQNConfig(**cfg))
    for net in (policy.model, policy.target_model):
        for p in net.parameters():
            torch.nn.init.zeros_(p)
        last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
        torch.nn.init.constant_(last.bias, q_value)
    return policy


@pytest.mark.parametrize("n_step", [1, 2, 3])
def test_nstep_target_stops_at_terminal_and_bootstraps_otherwise(
    n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    buf = episode_buffer([(1.0, False, False), (2.0, False, False), (4.0, True, False)])
    policy = constant_q_policy(10.0, gamma=gamma, n_step=n_step)
    idx = np.array([0, 1, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    rews = [1.0, 2.0, 4.0]

    def expected(t: int) -> float:
        g, k = 0.0, 0
        while k < n_step and t + k < 3:
            g += gamma**k * rews[t + k]
            k += 1
        terminal = t + k == 3
        return g + (0.0 if terminal else gamma**k * 10.0)

    np.testing.assert_allclose(batch.returns, [expected(t) for t in range(3)], rtol=1e-6)


def test_truncated_episode_bootstraps_from_its_last_obs_next(episode_buffer) -> None:
    buf = episode_buffer([(1.0, False, False), (1.0, False, True)])
    policy = constant_q_policy(10.0, gamma=0.9, n_step=5)
    idx = np.array([0])
    batch = policy.process_fn(buf[idx], buf, idx)
    np.testing.assert_allclose(batch.returns, [1.0 + 0.9 + 0.81 * 10.0], rtol=1e-6)


def test_epsilon_decays_linearly_and_is_test_value_in_eval() -> None:
    policy = DQNPolicy(OBS, ACT, DQNConfig(eps_start=1.0, eps_end=0.1, eps_decay_steps=100))
    policy.train()
    policy.set_env_step(0)
    assert policy.epsilon == pytest.approx(1.0)
    policy.set_env_step(50)
    assert policy.epsilon == pytest.approx(0.55)
    policy.set_env_step(1000)
    assert policy.epsilon == pytest.approx(0.1)
    policy.eval()
    assert policy.epsilon == 0.0


def test_schedule_stats_report_epsilon_and_the_learning_rate() -> None:
    policy = DQNPolicy(
        OBS, ACT, DQNConfig(lr=1e-3, eps_start=1.0, eps_end=0.1, eps_decay_steps=100)
    )
    policy.train()
    policy.set_env_step(50)
    assert policy.schedule_stats() == {"lr/q": pytest.approx(1e-3), "epsilon": pytest.approx(0.55)}


def test_exploration_noise_rate_matches_epsilon() -> None:
    policy = DQNPolicy(OBS, ACT, DQNConfig(eps_start=0.5, eps_end=0.5))
    policy.seed(0)
    policy.train()
    act = np.zeros(20_000, dtype=np.int64)
    noisy = policy.exploration_noise(act, Batch())
    # half the actions are random, half of those land on action 1
    assert abs(noisy.mean() - 0.25) < 0.02


def test_dueling_head_outputs_one_q_per_action() -> None:
    policy = DQNPolicy(OBS, gym.spaces.Discrete(5), DQNConfig(dueling=True, hidden_sizes=[16, 16]))
    out = policy(Batch(obs=np.zeros((7, 3), np.float32)))
    assert out.logits.shape == (7, 5) and out.act.shape == (7,)


def test_double_dqn_uses_online_argmax() -> None:
    policy = DQNPolicy(OBS, ACT, DQNConfig(double=True))
    with torch.no_grad():
        for p in policy.model.parameters():
            p.zero_()
        for p in policy.target_model.parameters():
            p.zero_()
        policy.model.body[-1].bias.copy_(torch.tensor([0.0, 1.0]))  # online prefers action 1
        policy.target_model.body[-1].bias.copy_(torch.tensor([5.0, 2.0]))  # target values
    q = policy.target_value(torch.zeros(1, 3))
    assert float(q[0]) == pytest.approx(2.0)
    policy.config.double = False
    assert float(policy.target_value(torch.zeros(1, 3))[0]) == pytest.approx(5.0)


def test_hard_target_update_every_interval(episode_buffer) -> None:
    policy = DQNPolicy(OBS, ACT, DQNConfig(tau=None, target_update_interval=3, lr=0.1))
    buf = episode_buffer([(1.0, False, False)] * 10)
    before = [p.clone() for p in policy.target_model.parameters()]
    for _ in range(2):
        policy.update(4, buf)
    assert all(torch.equal(a, b) for a, b in zip(before, policy.target_model.parameters()))
    policy.update(4, buf)
    assert all(
        torch.equal(a, b)
        for a, b in zip(policy.model.parameters(), policy.target_model.parameters())
    )


def test_soft_target_update_moves_by_tau(episode_buffer) -> None:
    policy = DQNPolicy(OBS, ACT, DQNConfig(tau=0.5, lr=0.1))
    buf = episode_buffer([(1.0, False, False)] * 10)
    old_target = [p.clone() for p in policy.target_model.parameters()]
    policy.update(4, buf)
    for t_old, t_new, online in zip(
        old_target, policy.target_model.parameters(), policy.model.parameters()
    ):
        torch.testing.assert_close(t_new, 0.5 * t_old + 0.5 * online)


def test_learning_reduces_td_error_on_a_fixed_batch(episode_buffer) -> None:
    # gamma=0 makes the target the reward itself, so the fit must converge
    policy = DQNPolicy(
        OBS, ACT, DQNConfig(lr=1e-2, gamma=0.0, tau=None, target_update_interval=0, n_step=1)
    )
    buf = episode_buffer([(1.0, False, False), (0.0, False, False), (2.0, True, False)])
    losses = [policy.update(0, buf)["loss"] for _ in range(200)]
    assert losses[-1] < 0.1 * losses[0]


def test_continuous_actions_are_rejected_with_a_hint() -> None:
    with pytest.raises(TypeError, match="Discrete action space"):
        DQNPolicy(OBS, gym.spaces.Box(-1, 1, (2,)))


def test_make_policy_rejects_unknown_config_field() -> None:
    with pytest.raises(rlblocks.ConfigError, match="lrr"):
        rlblocks.make_policy("dqn", OBS, ACT, lrr=0.1)


@pytest.mark.slow
def test_dqn_solves_cartpole_with_default_settings(tmp_path) -> None:
    """The README's first command: `rlblocks train dqn` reaches 475 over 100 test episodes."""
    result = rlblocks.train("dqn", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
