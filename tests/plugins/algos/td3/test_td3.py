"""TD3: delayed actor updates and target policy smoothing."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

import rlblocks
from rlblocks.contracts import Batch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)


def test_actor_and_targets_move_only_every_policy_delay_steps(random_buffer) -> None:
    policy = rlblocks.make_policy("td3", OBS, ACT, policy_delay=3)
    buf = random_buffer(ACT)
    actor0 = [p.clone() for p in policy.actor.parameters()]
    target0 = [p.clone() for p in policy.critic_target.parameters()]
    critic0 = [p.clone() for p in policy.critic.parameters()]
    for _ in range(2):
        policy.update(16, buf)
    assert all(torch.equal(a, b) for a, b in zip(actor0, policy.actor.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target0, policy.critic_target.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(critic0, policy.critic.parameters()))
    policy.update(16, buf)
    assert not all(torch.equal(a, b) for a, b in zip(actor0, policy.actor.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(target0, policy.critic_target.parameters()))


def test_target_smoothing_noise_is_clipped() -> None:
    obs = torch.randn(8, 3)
    exact = rlblocks.make_policy("td3", OBS, ACT, policy_noise=5.0, noise_clip=0.0)
    act = exact.actor_target(obs)
    expected = exact.critic_target(obs, act).min(dim=0).values
    torch.testing.assert_close(exact.target_value(obs), expected)
    noisy = rlblocks.make_policy("td3", OBS, ACT, policy_noise=5.0, noise_clip=0.3)
    noisy.load_state_dict(exact.state_dict())
    assert not torch.allclose(noisy.target_value(obs), expected)


def test_the_smoothed_target_action_is_clipped_to_the_bounds_unless_told_not_to() -> None:
    obs = torch.randn(64, 3)
    seen: list[torch.Tensor] = []
    for clip in (True, False):
        policy = rlblocks.make_policy(
            "td3", OBS, ACT, policy_noise=1.0, noise_clip=0.5, target_action_clip=clip
        )
        with torch.no_grad():  # a saturated target actor, mu' = 1: half the noise leaves [-1, 1]
            last = [m for m in policy.actor_target.modules() if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            last.bias.fill_(20.0)
        policy.critic_target.forward = lambda o, a: (seen.append(a), a.sum(-1)[None])[1]
        torch.manual_seed(0)
        policy.target_value(obs)
    clipped, raw = seen
    assert clipped.max() == 1.0 and clipped.min() >= 0.5  # 1 + noise in [-0.5, 0.5], clipped
    assert raw.max() > 1.1 and raw.min() >= 0.5 and raw.max() <= 1.5
    torch.testing.assert_close(raw.clamp(-1.0, 1.0), clipped)  # the same draws either way


def test_exploration_noise_is_added_to_the_actor_output() -> None:
    policy = rlblocks.make_policy("td3", OBS, ACT, exploration_sigma=0.2)
    policy.seed(0)
    act = np.zeros((20_000, 2), np.float32)
    noisy = policy.exploration_noise(act, Batch())
    assert abs(noisy.std() - 0.2) < 0.01
