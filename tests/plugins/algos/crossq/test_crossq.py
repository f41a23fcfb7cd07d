"""CrossQ: Batch Renormalization's corrections and running statistics, the joint critic pass,
no target networks, the delayed actor, the paper's Adam and presets, and Pendulum from scratch."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rlblocks
from rlblocks.contracts import Batch, ConfigError
from rlblocks.run import build_config, spec_lookup
from rlblocks_algo_crossq.renorm import BatchRenorm1d

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
SMALL = {"hidden_sizes": [16], "critic_hidden_sizes": [32]}


def test_renorm_is_batch_norm_during_warm_up_and_moves_the_running_statistics() -> None:
    torch.manual_seed(0)
    brn = BatchRenorm1d(4, momentum=0.9, eps=1e-3, warmup_steps=2)
    x = torch.randn(64, 4) * 3.0 + 2.0
    out = brn(x)
    expected = F.batch_norm(x, None, None, training=True, eps=1e-3)
    torch.testing.assert_close(out, expected)
    # running statistics moved 1 - momentum = 10% of the way from (0, 1) to the batch's
    torch.testing.assert_close(brn.running_mean, 0.1 * x.mean(0))
    torch.testing.assert_close(brn.running_var, 0.9 + 0.1 * x.var(0, unbiased=False))
    assert int(brn.steps) == 1


def test_renorm_clips_r_and_d_after_warm_up() -> None:
    torch.manual_seed(0)
    brn = BatchRenorm1d(3, eps=0.0, r_max=2.0, d_max=0.5, warmup_steps=0)
    # running statistics far from the batch's: mean 0, std 1 against mean 10, std ~5
    x = torch.randn(256, 3) * 5.0 + 10.0
    mean, std = x.mean(0), x.var(0, unbiased=False).sqrt()
    out = brn(x)
    # r = std_B / 1 ~ 5 clipped to 2; d = (10 - 0) / 1 clipped to 0.5
    torch.testing.assert_close(out, (x - mean) / std * 2.0 + 0.5)
    # inside the bounds nothing is clipped: running stats equal to the batch's give BN exactly
    brn2 = BatchRenorm1d(3, eps=0.0, r_max=2.0, d_max=0.5, warmup_steps=0, momentum=0.5)
    brn2.running_mean.copy_(mean)
    brn2.running_var.copy_(std.pow(2) * 1.21)  # r = 1 / 1.1, d = 0
    torch.testing.assert_close(brn2(x), (x - mean) / std / 1.1)


def test_renorm_gradient_treats_r_and_d_as_constants_and_eval_uses_running_stats() -> None:
    torch.manual_seed(0)
    brn = BatchRenorm1d(2, eps=1e-3, warmup_steps=0)
    brn.running_var.fill_(4.0)
    x = torch.randn(32, 2, requires_grad=True)
    w = torch.randn(32, 2)
    (brn(x) * w).sum().backward()
    # the reference: batch norm times the numbers r and d (no gradient through them)
    ref_x = x.detach().clone().requires_grad_(True)
    std = torch.sqrt(x.detach().var(0, unbiased=False) + 1e-3)
    r = std / torch.sqrt(torch.tensor(4.0) + 1e-3)  # ~0.5, inside [1/3, 3]
    d = x.detach().mean(0) / torch.sqrt(torch.tensor(4.0) + 1e-3)
    ((F.batch_norm(ref_x, None, None, training=True, eps=1e-3) * r + d) * w).sum().backward()
    torch.testing.assert_close(x.grad, ref_x.grad)
    brn.eval()
    before = brn.running_mean.clone()
    y = torch.randn(5, 2)
    expected = (y - brn.running_mean) / torch.sqrt(brn.running_var + 1e-3)
    torch.testing.assert_close(brn(y), expected)
    torch.testing.assert_close(brn.running_mean, before)  # evaluation moves nothing


def random_batch_buffer(n: int = 64):
    from rlblocks.replay import ReplayBuffer

    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n)
    for _ in range(n):
        buf.add(
            Batch(
                obs=rng.uniform(-1, 1, 3).astype(np.float32),
                act=rng.uniform(-1, 1, 2).astype(np.float32),
                rew=float(rng.normal()),
                terminated=False,
                truncated=False,
                obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
            )
        )
    return buf


def test_critics_see_current_and_next_pairs_in_one_training_pass() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("crossq", OBS, ACT, policy_delay=10, **SMALL)
    calls: list[tuple[int, bool]] = []
    policy.critic.register_forward_hook(
        lambda mod, args, out: calls.append((args[1].shape[0], mod.training))
    )
    policy.update(16, random_batch_buffer())
    assert calls == [(32, True)]  # one pass over [s; s'], in training mode
    # no target network anywhere
    assert not any("target" in name for name, _ in policy.named_modules())


def test_acting_never_moves_the_normalisation_statistics() -> None:
    policy = rlblocks.make_policy("crossq", OBS, ACT, **SMALL)
    stats = {k: v.clone() for k, v in policy.state_dict().items() if "running" in k}
    policy.train()
    policy(Batch(obs=np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)))
    for k, v in stats.items():
        torch.testing.assert_close(policy.state_dict()[k], v)


def test_the_actor_steps_every_policy_delay_critic_steps_with_adam_beta1_one_half() -> None:
    torch.manual_seed(0)
    policy = rlblocks.make_policy("crossq", OBS, ACT, policy_delay=3, **SMALL)
    for step in (policy.actor_step, policy.critic_step, policy.temperature.optimizer_step):
        assert step.optim.param_groups[0]["betas"] == (0.5, 0.999)
    buf = random_batch_buffer()
    moved = []
    for _ in range(6):
        before = [p.detach().clone() for p in policy.actor_step.params]
        policy.update(16, buf)
        moved.append(any(not torch.equal(a, p) for a, p in zip(before, policy.actor_step.params)))
    assert moved == [False, False, True, False, False, True]


def test_mujoco_presets_are_the_papers_and_pendulum_is_small() -> None:
    config = build_config("crossq", flags={"env": {"id": "Hopper-v5"}}, spec_lookup=spec_lookup)
    a = config.algo
    assert list(a.critic_hidden_sizes) == [2048, 2048] and list(a.hidden_sizes) == [256, 256]
    assert (a.actor_lr, a.critic_lr, a.adam_beta1, a.policy_delay) == (1e-3, 1e-3, 0.5, 3)
    assert (a.bn_momentum, a.bn_warmup) == (0.99, 100_000)
    assert config.trainer.warmup_steps == 5_000 and config.trainer.batch_size == 256
    pendulum = build_config("crossq", spec_lookup=spec_lookup)
    assert list(pendulum.algo.critic_hidden_sizes) == [256, 256]


def test_the_simba_network_option_is_refused_naming_what_to_do() -> None:
    env = gym.make("Pendulum-v1")
    with pytest.raises(ConfigError, match=r"algo\.network='simba': CrossQ's critics .* 'mlp'"):
        rlblocks.make_policy("crossq", env.observation_space, env.action_space, network="simba")


def test_a_bad_momentum_is_one_line_naming_the_field() -> None:
    with pytest.raises(rlblocks.ConfigError, match=r"bn_momentum.*\[0, 1\)"):
        rlblocks.make_policy("crossq", OBS, ACT, bn_momentum=1.0)


@pytest.mark.slow
def test_crossq_learns_pendulum_from_scratch(tmp_path) -> None:
    """Pendulum-v1 to a mean return of -400 over 100 test episodes within 8,000 env steps with
    the Pendulum defaults (seed 0 solved at 3,500 steps when this was set; seed 1 checked)."""
    result = rlblocks.train(
        "crossq", seed=0, stop_reward=-400, max_env_steps=8_000, loggers=[], progress=False,
        run_dir=tmp_path / "run",
    )  # fmt: skip
    assert result.solved, result
    assert result.best_test_return >= -400.0
