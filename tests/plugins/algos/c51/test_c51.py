"""C51: the projected n-step target, the cross-entropy loss, acting on expected values,
checkpoints, and training to CartPole's threshold with the defaults."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch
from rlblocks_algo_c51.c51 import C51Policy
from rlblocks_algo_c51.config import C51Config

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)


def point_mass_policy(atom: int, **cfg) -> C51Policy:
    """Every network puts all probability on support atom ``atom`` for every action."""
    policy = C51Policy(OBS, ACT, C51Config(num_atoms=11, v_min=-5, v_max=5, **cfg))
    for net in (policy.model, policy.target_model):
        for p in net.parameters():
            torch.nn.init.zeros_(p)
        last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.bias.view(2, 11)[:, atom] = 50.0
    return policy


@pytest.mark.parametrize("n_step", [1, 3])
def test_target_shifts_the_bootstrap_distribution_and_stops_at_terminal(
    n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    buf = episode_buffer([(1.0, False, False), (1.0, False, False), (1.0, True, False)])
    policy = point_mass_policy(atom=8, gamma=gamma, n_step=n_step)  # the atom at v = 3
    idx = np.array([0, 2])
    batch = policy.process_fn(buf[idx], buf, idx)
    target = policy.target_distribution(batch)
    support = policy.support.numpy()
    mean = (target.numpy() * support).sum(axis=1)
    m0 = min(n_step, 3)
    partial0 = sum(gamma**k for k in range(m0))
    boot0 = 0.0 if m0 == 3 else gamma**m0 * 3.0
    assert mean[0] == pytest.approx(partial0 + boot0, abs=1e-4)
    assert mean[1] == pytest.approx(1.0, abs=1e-4)  # the terminal step: its reward only
    np.testing.assert_allclose(target.sum(dim=1).numpy(), 1.0, atol=1e-6)


def test_acting_is_greedy_on_expected_values() -> None:
    policy = point_mass_policy(atom=5)
    last = [m for m in policy.model.modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():  # action 1 gets half its mass on the top atom
        last.bias.view(2, 11)[1, 10] = 50.0
    out = policy(Batch(obs=np.zeros((4, 3), np.float32)))
    assert (out.act == 1).all()
    torch.testing.assert_close(out.logits[0], torch.tensor([0.0, 2.5]), atol=1e-4, rtol=0)


def test_learning_fits_a_fixed_batch(episode_buffer) -> None:
    policy = C51Policy(OBS, ACT, C51Config(lr=1e-2, gamma=0.0, n_step=1, tau=None,
                                           target_update_interval=0, num_atoms=11, v_min=0,
                                           v_max=4))  # fmt: skip
    buf = episode_buffer([(1.0, False, False), (0.0, False, False), (2.0, True, False)])
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(300)]
    assert losses[-1] < 0.2 * losses[0]
    q = policy(Batch(obs=np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], np.float32))).logits
    torch.testing.assert_close(q[[0, 1, 2], [0, 1, 0]], torch.tensor([1.0, 0.0, 2.0]),
                               atol=0.15, rtol=0)  # fmt: skip


def test_checkpoint_round_trip_gives_the_same_values() -> None:
    policy = C51Policy(OBS, ACT, C51Config(dueling=True, noisy=True))
    fresh = C51Policy(OBS, ACT, C51Config(dueling=True, noisy=True))
    fresh.load_state_dict(policy.state_dict())
    fresh.load_extra_state(policy.extra_state())
    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    torch.testing.assert_close(policy(Batch(obs=obs)).logits, fresh(Batch(obs=obs)).logits)


def test_support_bounds_are_checked_by_field() -> None:
    with pytest.raises(rlblocks.ConfigError, match="v_max"):
        rlblocks.make_policy("c51", OBS, ACT, v_min=3.0, v_max=1.0)


def test_cartpole_preset_fits_its_returns_and_stays_off_other_envs() -> None:
    from rlblocks.run import _config as cfg
    from rlblocks.run import spec_lookup

    cart = cfg.build_config("c51", spec_lookup=spec_lookup)  # the default env: CartPole-v1
    # +1 per step: discounted returns in [1, 1 / (1 - gamma)] = [1, 100] fit the support
    assert cart.algo.gamma == 0.99 and (cart.algo.v_min, cart.algo.v_max) == (0.0, 100.0)
    acro = cfg.build_config("c51", flags={"env": {"id": "Acrobot-v1"}}, spec_lookup=spec_lookup)
    assert acro.algo.gamma == 0.9 and (acro.algo.v_min, acro.algo.v_max) == (-10.0, 10.0)


@pytest.mark.slow
def test_c51_solves_cartpole_with_default_settings(tmp_path) -> None:
    # CartPole's preset (gamma 0.99 on [0, 100]) solved tuning seeds 0-4 at 25k-32.5k env
    # steps, well inside the 100k budget; the earlier gamma 0.9 defaults came close to the
    # budget on one seed in five, so a fixed-seed test could pass on one CPU and fail on another
    result = rlblocks.train("c51", seed=0, loggers=[], progress=False, run_dir=tmp_path / "run")
    assert result.solved, result
    assert result.best_test_return >= 475.0
