"""The EnvPool backend: the VectorEnv protocol over EnvPool's C++ envs, with no autoreset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.errors import ConfigError, EnvWorkerError

pytest.importorskip("envpool")

OWN_ID = "rlblocks-test/OwnCartPole-v0"  # a gymnasium id EnvPool has never heard of
if OWN_ID not in gym.registry:
    gym.register(OWN_ID, entry_point="gymnasium.envs.classic_control:CartPoleEnv")


def make(num_envs: int = 4, env_id: str = "CartPole-v1", **options):
    return rlblocks.make_vector_env("envpool", env_id, num_envs=num_envs, **options)


def test_spaces_and_shapes_follow_the_env_id() -> None:
    with make() as envs:
        assert envs.num_envs == 4 and len(envs) == 4
        assert envs.action_space == gym.spaces.Discrete(2)
        obs, infos = envs.reset(seed=0)
        assert obs.shape == (4, 4) and len(infos) == 4
        obs, rew, term, trunc, infos = envs.step(np.zeros(4, dtype=np.int64))
        assert obs.shape == (4, 4) and rew.dtype == np.float64 and term.dtype == bool
        assert trunc.shape == (4,) and len(infos) == 4


def test_int_seed_seeds_env_i_with_seed_plus_i() -> None:
    with make() as a, make() as b:
        obs_a, _ = a.reset(seed=10)
        obs_b, _ = b.reset(seed=[10, 11, 12, 13])
        np.testing.assert_array_equal(obs_a, obs_b)
        assert not np.array_equal(obs_a[0], obs_a[1])
        other, _ = b.reset(seed=11)
        assert not np.array_equal(other, obs_a)
        # EnvPool seeds whole pools only: a seeded reset of some envs says so
        with pytest.raises(EnvWorkerError, match="whole pool"):
            b.reset(env_ids=[2], seed=12)


def test_subset_results_come_back_in_env_ids_order() -> None:
    with make() as envs, make() as ref:
        envs.reset(seed=0)
        ref.reset(seed=0)
        ids = np.array([3, 1])
        obs, *_ = envs.step(np.zeros(2, dtype=np.int64), ids)
        full, *_ = ref.step(np.zeros(4, dtype=np.int64))
        np.testing.assert_array_equal(obs, full[ids])


def test_a_finished_env_is_never_reset_behind_the_callers_back() -> None:
    with make(num_envs=2) as envs:
        envs.reset(seed=0)
        for _ in range(200):  # pushing one way ends a CartPole episode within a few dozen steps
            _, _, term, trunc, _ = envs.step(np.zeros(2, dtype=np.int64))
            if (term | trunc).any():
                break
        done = np.flatnonzero(term | trunc)
        assert len(done)
        with pytest.raises(EnvWorkerError, match="reset"):
            envs.step(np.zeros(2, dtype=np.int64))
        envs.reset(env_ids=done)
        envs.step(np.zeros(2, dtype=np.int64))  # fine again after the reset


def test_collected_episodes_match_their_rewards() -> None:
    # CartPole pays 1 per step: a transition leaking across an autoreset would break the sum
    envs = make(num_envs=4)
    buffer = rlblocks.make_buffer("replay", size=5_000, num_envs=4)
    stats = rlblocks.Collector(None, envs, buffer, seed=0).collect(n_episode=12, random=True)
    np.testing.assert_array_equal(np.ravel(stats.returns), np.ravel(stats.lengths))
    ends = np.flatnonzero(buffer.terminated[: len(buffer)] | buffer.truncated[: len(buffer)])
    assert len(ends) >= 12
    envs.close()
    envs.close()


def test_ids_envpool_lacks_and_wrapped_envs_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match="does not provide"):
        make(env_id=OWN_ID)

    def wrapped():
        return gym.wrappers.ClipReward(gym.make("CartPole-v1"), 0.0, 0.5)

    with pytest.raises(ConfigError, match="ClipReward"):
        rlblocks.make_vector_env("envpool", [wrapped, wrapped])


def test_auto_picks_envpool_for_an_id_it_provides() -> None:
    pytest.importorskip("mujoco")
    envs = rlblocks.make_vector_env("auto", "HalfCheetah-v5", num_envs=2)
    try:
        assert "envpool" in envs.auto_choice
    finally:
        envs.close()


def test_auto_keeps_classic_control_in_process() -> None:
    """EnvPool's per-call thread hand-off costs more than a CartPole step: auto skips it."""
    envs = rlblocks.make_vector_env("auto", "CartPole-v1", num_envs=4)
    try:
        assert "envpool" not in envs.auto_choice
    finally:
        envs.close()


def test_default_threads() -> None:
    from rlblocks_env_envpool.envpool_env import default_threads

    assert default_threads("CartPole-v1", 8) == 1
    assert 1 <= default_threads("HalfCheetah-v5", 8) <= 8
    assert default_threads("HalfCheetah-v5", 1) == 1
