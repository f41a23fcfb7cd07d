"""The intrinsic curiosity module (``algo.intrinsic = "icm"``): rewards reach the targets of
on-policy and replay-based algorithms, its state is checkpointed, and it explores a corridor
that DQN alone does not."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tests_support_corridor import Corridor, long_corridor

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks_algo_dqn.config import DQNConfig
from rlblocks_algo_dqn.dqn import DQNPolicy
from rlblocks_algo_ppo.config import PPOConfig
from rlblocks_algo_reinforce.config import ReinforceConfig
from rlblocks_algo_reinforce.reinforce import ReinforcePolicy

OBS = gym.spaces.Box(-100.0, 100.0, (3,), dtype=np.float32)
EPISODE = [(1.0, False, False), (2.0, False, False), (3.0, False, False), (4.0, True, False)]


def _bonus(policy, buf, idx) -> np.ndarray:
    return policy.curiosity.intrinsic(buf.obs[idx], buf.act[idx], buf.obs_next[idx])


def test_a_misspelt_intrinsic_reward_is_one_line_naming_the_choice() -> None:
    with pytest.raises(ValueError, match="did you mean 'icm'"):
        PPOConfig(intrinsic="icn")
    assert PPOConfig().intrinsic is None and DQNConfig().intrinsic is None


def test_without_intrinsic_the_policy_has_no_curiosity() -> None:
    policy = ReinforcePolicy(OBS, gym.spaces.Discrete(2), ReinforceConfig())
    assert policy.curiosity is None and "icm" not in policy.optim_steps


def test_on_policy_returns_are_computed_from_the_intrinsic_reward(episode_buffer) -> None:
    torch.manual_seed(0)
    cfg = ReinforceConfig(gamma=0.5, intrinsic="icm", icm_reward_scale=1.0)
    policy = ReinforcePolicy(OBS, gym.spaces.Discrete(2), cfg)
    buf = episode_buffer(EPISODE)
    idx = buf.sample_index(0)
    bonus = _bonus(policy, buf, idx)
    assert (bonus > 0).all()
    batch, view = policy.curiosity.prepare(buf[idx], buf)
    out = policy.process_fn(batch, view, idx)
    rew = np.array([r for r, _, _ in EPISODE]) + bonus
    want = [rew[0] + 0.5 * rew[1] + 0.25 * rew[2] + 0.125 * rew[3],
            rew[1] + 0.5 * rew[2] + 0.25 * rew[3], rew[2] + 0.5 * rew[3], rew[3]]  # fmt: skip
    np.testing.assert_allclose(out.returns.numpy(), want, rtol=1e-5)


def test_curiosity_alone_drops_the_env_reward(episode_buffer) -> None:
    torch.manual_seed(0)
    cfg = ReinforceConfig(gamma=0.0, intrinsic="icm", icm_extrinsic=False)
    policy = ReinforcePolicy(OBS, gym.spaces.Discrete(2), cfg)
    buf = episode_buffer(EPISODE)
    idx = buf.sample_index(0)
    batch, view = policy.curiosity.prepare(buf[idx], buf)
    np.testing.assert_allclose(policy.process_fn(batch, view, idx).returns.numpy(),
                               _bonus(policy, buf, idx), rtol=1e-5)  # fmt: skip


def test_nstep_targets_read_the_intrinsic_reward_of_rows_past_the_sampled_one(
    episode_buffer,
) -> None:
    torch.manual_seed(0)
    cfg = DQNConfig(gamma=0.5, n_step=3, intrinsic="icm", icm_extrinsic=False)
    policy = DQNPolicy(OBS, gym.spaces.Discrete(2), cfg)
    buf = episode_buffer(EPISODE)
    every = buf.sample_index(0)
    bonus = _bonus(policy, buf, every)
    idx = np.array([0])  # only row 0 sampled: its 3-step target reads rows 1 and 2 too
    batch, view = policy.curiosity.prepare(buf[idx], buf)
    np.testing.assert_allclose(np.asarray(batch.rew), bonus[:1], rtol=1e-5)
    partial, _, _ = policy.target_parts(batch, view, idx)
    np.testing.assert_allclose(partial, [bonus[0] + 0.5 * bonus[1] + 0.25 * bonus[2]], rtol=1e-5)


def test_an_update_trains_the_module_and_logs_its_reward_and_losses(random_buffer) -> None:
    torch.manual_seed(0)
    cfg = DQNConfig(n_step=1, intrinsic="icm", icm_lr=1e-2)
    policy = DQNPolicy(gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2), cfg)
    buf = random_buffer(gym.spaces.Discrete(2))
    before = _bonus(policy, buf, np.arange(len(buf))).mean()
    for _ in range(30):
        stats = policy.update(64, buf)
    assert {"icm/reward", "icm/loss_inverse", "icm/loss_forward"} <= set(stats)
    assert np.isfinite(stats["icm/loss"])
    # the forward model learns these transitions, so they become less novel
    assert _bonus(policy, buf, np.arange(len(buf))).mean() < 0.5 * before


def test_the_module_is_checkpointed_with_the_policy_and_moves_with_it(random_buffer) -> None:
    torch.manual_seed(0)
    space = gym.spaces.Box(-1.0, 1.0, (3,))
    cfg = DQNConfig(n_step=1, intrinsic="icm", icm_lr=1e-2)
    trained = DQNPolicy(space, gym.spaces.Discrete(2), cfg)
    buf = random_buffer(gym.spaces.Discrete(2))
    for _ in range(5):
        trained.update(64, buf)
    rows = np.arange(8)
    fresh = DQNPolicy(space, gym.spaces.Discrete(2), cfg)
    assert not np.allclose(_bonus(fresh, buf, rows), _bonus(trained, buf, rows))
    fresh.load_state_dict(trained.state_dict())
    fresh.load_extra_state(trained.extra_state())
    np.testing.assert_allclose(_bonus(fresh, buf, rows), _bonus(trained, buf, rows))
    # its optimizer is one of the policy's: saved, restored and watched with the others
    assert fresh.optim_steps["icm"].steps == trained.optim_steps["icm"].steps == 5
    fresh.to("cpu")
    assert next(fresh.curiosity.module.parameters()).device.type == "cpu"


def test_an_action_space_it_cannot_predict_is_one_line() -> None:
    with pytest.raises(ConfigError, match="Discrete or Box actions"):
        rlblocks.make_policy("ppo", OBS, gym.spaces.MultiDiscrete([2, 3]), intrinsic="icm")


def test_a_policy_that_learns_from_sequence_windows_refuses_it_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"sequence windows.*leave algo\.intrinsic unset"):
        rlblocks.make_policy("r2d2", OBS, gym.spaces.Discrete(2), intrinsic="icm")


def test_other_algorithms_learn_with_it(random_buffer) -> None:
    # a value-based (C51) and an actor-critic (SAC) base build and step the module too
    torch.manual_seed(0)
    box = gym.spaces.Box(-1.0, 1.0, (3,))
    for name, act in (("c51", gym.spaces.Discrete(2)), ("sac", gym.spaces.Box(-1.0, 1.0, (2,)))):
        policy = rlblocks.make_policy(name, box, act, intrinsic="icm")
        stats = policy.update(32, random_buffer(act))
        assert np.isfinite(stats["icm/loss_forward"]) and stats["icm/reward"] > 0, name


def test_the_corridor_pays_only_at_its_far_end() -> None:
    env = Corridor(length=4, horizon=10)
    env.reset(seed=0)
    rewards = []
    for cell in range(3):  # the forward action of each cell in turn
        _, rew, term, trunc, _ = env.step(int(env.forward[cell]))
        rewards.append(rew)
    assert rewards == [0.0, 0.0, 1.0] and term and not trunc


@pytest.mark.slow
def test_dqn_with_icm_walks_a_sparse_corridor_that_dqn_alone_does_not(tmp_path) -> None:
    """The corridor (tests_support_corridor) of 25 cells, reward 1 only at the last, 30 steps
    an episode, the forward action different from cell to cell (never the same in three cells
    in a row). A uniformly random walk reached the end in none of 200,000 episodes, and DQN's
    epsilon-greedy acting on Q-values that have seen no reward is that walk or worse (a greedy
    policy over untrained values loops between two cells), so DQN alone has nothing to learn
    from. ICM rewards each transition its forward model has not learned yet, which draws the
    agent to the frontier. The same seed, settings and budget (25k env steps) for both runs;
    solved = the greedy test episode reaches the end. Tuning: DQN+ICM solved seeds 0 and
    1 within 25k, DQN alone neither of seeds 0 and 11 (on a 20-cell corridor DQN alone once
    reached the end by chance and learned it, so the corridor is 25 cells long)."""
    runs = {}
    for name, extra in (("dqn", []), ("dqn+icm", ["algo.intrinsic=icm"])):
        runs[name] = rlblocks.train(
            "dqn", env=long_corridor, seed=0, loggers=[], progress=False, quiet=True,
            run_dir=tmp_path / name.replace("+", "-"), max_env_steps=25_000, stop_reward=1.0,
            overrides=["env.num_test_envs=1", "trainer.test_episodes=1", *extra],
        )  # fmt: skip
    summary = {k: (r.solved, r.best_test_return, r.env_steps) for k, r in runs.items()}
    assert runs["dqn+icm"].solved and runs["dqn+icm"].best_test_return >= 1.0, summary
    assert not runs["dqn"].solved and runs["dqn"].best_test_return < 1.0, summary
