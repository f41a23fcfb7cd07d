"""What DDPG, TD3 and SAC share through core's OffPolicyPolicy: n-step targets that stop at
terminal steps, prioritized replay by composition, space checks, and learning a fixed target."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlblocks
from rlblocks.contracts import Batch

ALGOS = ["ddpg", "td3", "sac"]
OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), dtype=np.float32)


def ramp_act(t: int) -> np.ndarray:
    """The action ``episode_buffer`` stores at step ``t``: [0.1 * t]."""
    return np.array([0.1 * t], np.float32)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("n_step", [1, 3])
def test_nstep_target_stops_at_terminal_and_bootstraps_otherwise(
    algo: str, n_step: int, episode_buffer
) -> None:
    gamma = 0.5
    policy = rlblocks.make_policy(algo, OBS, ACT, gamma=gamma, n_step=n_step)
    seen = []

    def constant_value(obs_next):  # the bootstrap value, recording which obs it was asked for
        seen.append(obs_next[:, 0].clone())
        return torch.full((obs_next.shape[0],), 10.0)

    policy.target_value = constant_value
    buf = episode_buffer(
        [(1.0, False, False), (2.0, False, False), (4.0, True, False)], act=ramp_act
    )
    idx = np.array([0, 1, 2])
    returns = policy.process_fn(buf[idx], buf, idx).returns
    rews = [1.0, 2.0, 4.0]

    def expected(t: int) -> float:
        g, k = 0.0, 0
        while k < n_step and t + k < 3:
            g += gamma**k * rews[t + k]
            k += 1
        return g + (0.0 if t + k == 3 else gamma**k * 10.0)

    torch.testing.assert_close(returns, torch.tensor([expected(t) for t in range(3)]))
    # bootstrapped from the obs_next of the last step reached
    reached = [min(t + n_step, 3) for t in range(3)]
    torch.testing.assert_close(seen[0], torch.tensor(reached, dtype=torch.float32))


@pytest.mark.parametrize("algo", ALGOS)
def test_truncated_episode_bootstraps(algo: str, episode_buffer) -> None:
    policy = rlblocks.make_policy(algo, OBS, ACT, gamma=0.9, n_step=5)
    policy.target_value = lambda obs_next: torch.full((obs_next.shape[0],), 10.0)
    buf = episode_buffer([(1.0, False, False), (1.0, False, True)], act=ramp_act)
    idx = np.array([0])
    returns = policy.process_fn(buf[idx], buf, idx).returns
    torch.testing.assert_close(returns, torch.tensor([1.0 + 0.9 + 0.81 * 10.0]))


@pytest.mark.parametrize("algo", ALGOS)
def test_critic_fits_a_fixed_target(algo: str, episode_buffer) -> None:
    # gamma=0: the target is the reward itself, so the critic loss must fall
    torch.manual_seed(0)
    policy = rlblocks.make_policy(algo, OBS, ACT, gamma=0.0, critic_lr=1e-2, hidden_sizes=[32])
    buf = episode_buffer(
        [(1.0, False, False), (-1.0, False, False), (0.5, True, False)], act=ramp_act
    )
    losses = [float(policy.update(0, buf)["loss/critic"]) for _ in range(300)]
    assert losses[-1] < 0.05 * losses[0]


@pytest.mark.parametrize("algo", ALGOS)
def test_prioritized_sampling_composes_and_receives_td_errors(algo: str) -> None:
    torch.manual_seed(0)
    envs = rlblocks.make_vector_env("dummy", "Pendulum-v1", num_envs=2, seed=0)
    policy = rlblocks.make_policy(algo, envs.observation_space, envs.action_space)
    buf = rlblocks.make_buffer("prioritized", size=1_000, num_envs=2, alpha=0.6)
    rlblocks.Collector(policy, envs, buf, seed=0).collect(n_step=200)
    idx = buf.sample_indices(0)
    before = np.array(buf.sampler.weight(idx), copy=True)  # all priorities equal before the update
    stats = policy.update(64, buf)
    assert np.isfinite(float(stats["loss/critic"]))
    # the update's td errors became priorities
    assert not np.allclose(buf.sampler.weight(idx), before)
    envs.close()


@pytest.mark.parametrize("algo", ALGOS)
def test_discrete_actions_are_rejected_with_a_hint(algo: str) -> None:
    with pytest.raises(rlblocks.ConfigError, match="action spaces"):
        rlblocks.make_policy(algo, OBS, gym.spaces.Discrete(3))


@pytest.mark.parametrize("algo", ALGOS)
def test_actions_reach_the_whole_env_range(algo: str) -> None:
    policy = rlblocks.make_policy(algo, OBS, ACT)
    env_act = policy.map_action(np.array([[-1.0], [0.0], [1.0], [3.0]], np.float32))
    np.testing.assert_allclose(env_act[:, 0], [-2.0, 0.0, 2.0, 2.0])


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ddpg", "td3"])
def test_clip_exploration_keeps_the_action_the_env_runs(algo: str) -> None:
    act = np.full((4000, 1), 0.95, np.float32)  # near the bound: noise pushes many rows past it
    kept = {}
    for clip in (False, True):
        policy = rlblocks.make_policy(algo, OBS, ACT, exploration_sigma=0.3, clip_exploration=clip)
        policy.seed(0)
        kept[clip] = policy.exploration_noise(act, Batch())
        # the env receives the bounded action either way
        assert np.abs(policy.map_action(kept[clip])).max() <= 2.0
    assert kept[False].max() > 1.2, "unclipped: the buffer keeps actions past the bound"
    np.testing.assert_array_equal(kept[True], np.clip(kept[False], -1.0, 1.0))


@pytest.mark.parametrize("algo", ALGOS)
def test_solves_pendulum_with_default_settings(algo: str, tmp_path) -> None:
    """Pendulum-v1 to a mean return of -250 over 100 test episodes, from scratch."""
    result = rlblocks.train(
        algo, seed=0, stop_reward=-250, loggers=[], progress=False, run_dir=tmp_path / "run"
    )
    assert result.solved, result
    assert result.best_test_return >= -250.0


@pytest.mark.parametrize("algo", [*ALGOS, "redq", "crossq", "tqc"])
def test_actor_step_leaves_the_critics_gradients_alone(algo: str, episode_buffer) -> None:
    """The actor's loss flows through the critics but must not compute (or add to) their
    gradients: the critics' gradients after a whole update are the critic loss's own."""
    torch.manual_seed(0)
    extra = {
        "td3": {"policy_delay": 1},
        "redq": {"actor_delay": 1},
        "crossq": {"policy_delay": 1, "critic_hidden_sizes": [16]},
        "tqc": {"n_quantiles": 5},
    }.get(algo, {})
    policy = rlblocks.make_policy(algo, OBS, ACT, hidden_sizes=[16], **extra)
    buf = episode_buffer(
        [(1.0, False, False), (-1.0, False, False), (0.5, True, False)], act=ramp_act
    )
    after_critic: list[list[torch.Tensor]] = []
    critic_step = policy.critic_step
    original = critic_step.step

    def recording_step(loss: torch.Tensor, retain_graph: bool = False) -> None:
        original(loss, retain_graph)
        after_critic.append([p.grad.clone() for p in critic_step.params])

    critic_step.step = recording_step
    actor_before = [p.detach().clone() for p in policy.actor_step.params]
    policy.update(0, buf)
    assert after_critic  # (REDQ takes several critic steps per update: the last one counts)
    for grad, p in zip(after_critic[-1], critic_step.params, strict=True):
        torch.testing.assert_close(p.grad, grad, rtol=0, atol=0)
    assert all(p.requires_grad for p in critic_step.params)  # thawed again
    moved = [not torch.equal(a, p) for a, p in zip(actor_before, policy.actor_step.params)]
    assert any(moved)  # and the actor did learn


@pytest.mark.parametrize("algo", [*ALGOS, "redq", "crossq", "tqc"])
def test_a_second_tanh_on_a_tanh_actor_is_refused(algo: str) -> None:
    # tanh over the actor's tanh would keep every env action off the bounds
    with pytest.raises(rlblocks.ConfigError, match=r"action_bound_method.*second time.*'clip'"):
        rlblocks.make_policy(algo, OBS, ACT, action_bound_method="tanh")
