"""Rainbow: every ingredient on by default and each one switchable by config; the
no-distributional ablation learns expected values; training to CartPole's threshold."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.algo.nets import NoisyLinear
from rlblocks.contracts import Batch
from rlblocks_algo_rainbow.config import RainbowConfig
from rlblocks_algo_rainbow.rainbow import RainbowPolicy

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Discrete(2)
# (rew, terminated, truncated) per step: rewards 1, 0, 2, and the third step ends the episode
EPISODE = [(1.0, False, False), (0.0, False, False), (2.0, True, False)]


def _noisy_layers(policy: RainbowPolicy) -> int:
    return sum(isinstance(m, NoisyLinear) for m in policy.model.modules())


def test_every_ingredient_is_on_by_default_and_switches_off() -> None:
    policy = RainbowPolicy(OBS, ACT)
    c = policy.config
    assert c.dueling and c.double and c.n_step == 3 and c.distributional
    assert _noisy_layers(policy) > 0 and policy.epsilon == 0.0
    assert policy.model.dueling
    plain = RainbowPolicy(OBS, ACT, RainbowConfig(noisy=False, dueling=False))
    assert _noisy_layers(plain) == 0 and not plain.model.dueling


def test_the_run_composes_a_prioritized_sampler_and_can_drop_it(tmp_path) -> None:
    from rlblocks.contracts import BufferAbilities
    from rlblocks.run import Experiment, spec_lookup
    from rlblocks.run import _config as cfg

    def buffer_of(overrides: list[str]):
        config = cfg.build_config(
            "rainbow", overrides=[*overrides, "run.loggers=[]"], spec_lookup=spec_lookup
        )
        exp = Experiment(config, None, quiet=True)
        exp.build()
        try:
            return exp.buffer
        finally:
            exp.train_envs.close()
            exp.test_envs.close()

    assert BufferAbilities.of(buffer_of([])).prioritized
    assert not BufferAbilities.of(buffer_of(["buffer.sampler=uniform"])).prioritized


def test_cartpole_preset_fits_its_returns_and_stays_off_other_envs() -> None:
    from rlblocks.run import _config as cfg
    from rlblocks.run import spec_lookup

    cart = cfg.build_config("rainbow", spec_lookup=spec_lookup)  # the default env: CartPole-v1
    # +1 per step: discounted returns in [1, 1 / (1 - gamma)] = [1, 100] fit the support
    assert cart.algo.gamma == 0.99 and (cart.algo.v_min, cart.algo.v_max) == (0.0, 100.0)
    assert cart.algo.eps_start == cart.algo.eps_end == 0.0  # noisy layers explore alone
    assert cart.buffer.options["sampler"].alpha == 0.6
    # another env keeps the generic defaults, whose support holds negative returns as well
    acro = cfg.build_config("rainbow", flags={"env": {"id": "Acrobot-v1"}}, spec_lookup=spec_lookup)
    assert acro.algo.gamma == 0.9 and (acro.algo.v_min, acro.algo.v_max) == (-10.0, 10.0)
    # what the user writes beats the preset
    mine = cfg.build_config("rainbow", overrides=["algo.v_max=50"], spec_lookup=spec_lookup)
    assert mine.algo.v_max == 50.0 and mine.algo.gamma == 0.99


@pytest.mark.parametrize("distributional", [True, False])
def test_both_losses_fit_a_fixed_batch(distributional: bool, episode_buffer) -> None:
    torch.manual_seed(0)
    cfg = RainbowConfig(lr=1e-2, gamma=0.0, n_step=1, tau=None, target_update_interval=0,
                        noisy=False, v_min=0.0, v_max=4.0, num_atoms=11,
                        distributional=distributional)  # fmt: skip
    policy = RainbowPolicy(OBS, ACT, cfg)
    buf = episode_buffer(EPISODE)
    losses = [float(policy.update(0, buf)["loss"]) for _ in range(300)]
    assert losses[-1] < 0.2 * losses[0]
    q = policy(Batch(obs=np.array([[0, 0, 0], [1, 0, 0], [2, 0, 0]], np.float32))).logits
    torch.testing.assert_close(q[[0, 1, 2], [0, 1, 0]], torch.tensor([1.0, 0.0, 2.0]),
                               atol=0.15, rtol=0)  # fmt: skip
    out_atoms = policy.model(torch.zeros(1, 3)).shape[-1]
    assert out_atoms == (11 if distributional else 1)


def test_noise_is_resampled_every_gradient_step_and_off_in_tests(episode_buffer) -> None:
    torch.manual_seed(0)
    policy = RainbowPolicy(OBS, ACT, RainbowConfig(n_step=1))
    obs = Batch(obs=np.ones((1, 3), np.float32))
    before = policy(obs).logits.clone()
    policy.update(0, episode_buffer(EPISODE))
    after_noise = policy(obs).logits
    assert not torch.allclose(before, after_noise)
    policy.eval()
    a, b = policy(obs).logits, policy(obs).logits
    torch.testing.assert_close(a, b)


@pytest.mark.slow
def test_rainbow_solves_cartpole_with_default_settings(tmp_path) -> None:
    result = rlblocks.train("rainbow", seed=0, loggers=[], progress=False,
                            run_dir=tmp_path / "run")  # fmt: skip
    assert result.solved, result
    assert result.best_test_return >= 475.0


def test_an_option_the_user_wrote_for_a_part_that_is_off_is_still_reported() -> None:
    from rlblocks.run import _config as cfg
    from rlblocks.run import spec_lookup

    with pytest.raises(rlblocks.ConfigError, match=r"\$\.buffer\.alpha: unknown field"):
        cfg.build_config("rainbow", overrides=["buffer.sampler=uniform", "buffer.alpha=0.7"],
                         spec_lookup=spec_lookup)  # fmt: skip
    kept = cfg.build_config("rainbow", overrides=["buffer.alpha=0.7"], spec_lookup=spec_lookup)
    assert kept.buffer.sampler == "prioritized"
