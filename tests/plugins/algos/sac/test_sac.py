"""SAC: the entropy temperature, deterministic evaluation, the MuJoCo presets, and
InvertedPendulum."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks.run import build_config, spec_lookup

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)


@pytest.mark.parametrize(("target_entropy", "direction"), [(-50.0, -1), (50.0, 1)])
def test_auto_alpha_moves_towards_the_entropy_target(
    target_entropy: float, direction: int, random_buffer
) -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, ACT, target_entropy=target_entropy, alpha_lr=1e-2)
    start = float(policy.alpha)
    buf = random_buffer(ACT)
    for _ in range(20):
        policy.update(32, buf)
    assert (float(policy.alpha) - start) * direction > 0


def test_fixed_alpha_stays_fixed(random_buffer) -> None:
    policy = rlblocks.make_policy("sac", OBS, ACT, auto_alpha=False, alpha=0.05)
    policy.update(32, random_buffer(ACT))
    # exactly the configured value (float32's 0.05), not exp(log(0.05)), a rounding off it
    assert policy.alpha.item() == torch.tensor(0.05).item()
    assert "alpha" not in policy.optim_steps


def test_testing_acts_with_the_mean_and_training_samples() -> None:
    policy = rlblocks.make_policy("sac", OBS, ACT)
    obs = Batch(obs=np.zeros((2, 3), np.float32))
    policy.eval()
    a, b = policy(obs).act, policy(obs).act
    np.testing.assert_array_equal(a, b)
    policy.train()
    assert not np.array_equal(policy(obs).act, policy(obs).act)


def test_target_value_is_soft_min_of_target_critics() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("sac", OBS, ACT, alpha=0.5, auto_alpha=False)
    obs = torch.randn(6, 3)
    torch.manual_seed(1)
    value = policy.target_value(obs)
    torch.manual_seed(1)
    act, logp = policy.actor(obs)
    q = policy.critic_target(obs, act)
    torch.testing.assert_close(value, torch.minimum(q[0], q[1]) - 0.5 * logp)


@pytest.mark.parametrize("env_id", ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5"])
def test_mujoco_locomotion_gets_a_fixed_temperature_and_adam_1e3(env_id: str) -> None:
    config = build_config("sac", flags={"env": {"id": env_id}}, spec_lookup=spec_lookup)
    assert (config.algo.auto_alpha, config.algo.alpha) == (False, 0.2)
    assert (config.algo.actor_lr, config.algo.critic_lr) == (1e-3, 1e-3)
    assert list(config.algo.hidden_sizes) == [256, 256] and config.algo.n_step == 1
    assert (config.trainer.batch_size, config.trainer.warmup_steps) == (256, 10_000)
    assert config.buffer.size == 1_000_000


def test_pendulums_tune_the_temperature_and_users_can_turn_it_back_on_for_mujoco() -> None:
    pendulum = build_config("sac", spec_lookup=spec_lookup)
    assert pendulum.env.id == "Pendulum-v1" and pendulum.algo.auto_alpha
    assert list(pendulum.algo.hidden_sizes) == [64, 64]
    balance = build_config(
        "sac", flags={"env": {"id": "InvertedPendulum-v5"}}, spec_lookup=spec_lookup
    )
    assert balance.algo.auto_alpha and list(balance.algo.hidden_sizes) == [64, 64]
    tuned = build_config(
        "sac", flags={"env": {"id": "HalfCheetah-v5"}}, overrides=["algo.auto_alpha=true"],
        spec_lookup=spec_lookup,
    )  # fmt: skip
    assert tuned.algo.auto_alpha and tuned.algo.actor_lr == 1e-3


@pytest.mark.slow
def test_sac_balances_inverted_pendulum(tmp_path) -> None:
    """InvertedPendulum-v5 to a mean return of 950 with its own preset (Pendulum-sized)."""
    result = rlblocks.train(
        "sac",
        env="InvertedPendulum-v5",
        seed=0,
        stop_reward=950,
        loggers=[],
        progress=False,
        run_dir=tmp_path / "run",
    )
    assert result.solved, result
