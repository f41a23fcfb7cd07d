"""The collector's batch modes (RLlib's names): truncate-episodes collects of an exact number of
steps or an exact fragment per env, complete-episodes collects of whole episodes only, counted
over many env counts, episode lengths and sizes."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
from rlblocks.collect import AsyncCollector, Collector
from rlblocks.contracts import Batch, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.replay import ReplayBuffer
from rlblocks.run import make_vector_env


class _Countdown(gym.Env):
    """Episodes of exactly ``length`` steps; the observation is the step within the episode."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return np.array([self.t], np.float32), 1.0, self.t >= self.length, False, {}


class _Zero:
    """A policy that always takes action 0."""

    training = False

    def __call__(self, batch: Batch, state: Any = None) -> Batch:
        return Batch(act=np.zeros(len(batch.obs), dtype=np.int64))

    def map_action(self, act: Any) -> Any:
        return act


def _collector(lengths: list[int], size: int = 4096) -> tuple[Collector, ReplayBuffer]:
    fns = [lambda n=n: _Countdown(n) for n in lengths]
    envs = make_vector_env("dummy", fns, num_envs=len(lengths), seed=0)
    buf = ReplayBuffer(size, num_envs=len(lengths))
    return Collector(_Zero(), envs, buf, seed=0), buf


def _steps_per_env(buf: ReplayBuffer, n_envs: int) -> np.ndarray:
    return np.bincount(buf.env_id[buf.sample_index(0)], minlength=n_envs)


lengths_st = st.lists(st.integers(1, 7), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, sizes=st.lists(st.integers(1, 23), min_size=1, max_size=4))
def test_exact_collects_return_exactly_the_steps_asked_and_keep_envs_level(
    lengths: list[int], sizes: list[int]
) -> None:
    collector, buf = _collector(lengths)
    total = 0
    for n in sizes:
        stats = collector.collect(n_step=n, exact=True)
        total += n
        assert stats.n_step == n
        assert len(buf) == total
        per_env = _steps_per_env(buf, len(lengths))
        assert per_env.sum() == total and per_env.max() - per_env.min() <= 1


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, fragments=st.lists(st.integers(1, 9), min_size=1, max_size=3))
def test_fragments_step_every_env_exactly_that_often(
    lengths: list[int], fragments: list[int]
) -> None:
    collector, buf = _collector(lengths)
    done = 0
    for frag in fragments:
        stats = collector.collect(fragment=frag)
        done += frag
        assert stats.n_step == frag * len(lengths)
        assert list(_steps_per_env(buf, len(lengths))) == [done] * len(lengths)


@settings(max_examples=60, deadline=None)
@given(lengths=lengths_st, n=st.integers(1, 40))
def test_complete_episodes_collects_whole_episodes_and_stops_starting_them_in_time(
    lengths: list[int], n: int
) -> None:
    collector, buf = _collector(lengths)
    collector.collect(n_step=3, exact=True)  # leave episodes in progress: they are not reused
    buf.reset()
    stats = collector.collect(n_step=n, complete_episodes=True)
    assert stats.n_step >= n
    # every step belongs to a finished episode, each of its env's full length
    assert stats.lengths.sum() == stats.n_step == len(buf)
    assert len(buf.unfinished_index()) == 0
    counts = np.bincount(buf.env_id[buf.sample_index(0)], minlength=len(lengths))
    for env, length in enumerate(lengths):
        assert counts[env] % length == 0
    # no episode starts once n steps are in: each env overshoots by less than one episode
    assert stats.n_step < n + sum(lengths)
    # the next collect starts afresh too
    assert collector.collect(n_step=n, complete_episodes=True).lengths.sum() >= n


@pytest.mark.parametrize(("num_envs", "n", "expected"), [(2, 7, 8), (3, 7, 9), (4, 8, 8)])
def test_plain_n_step_collects_whole_rounds(num_envs: int, n: int, expected: int) -> None:
    collector, _ = _collector([50] * num_envs)
    assert collector.collect(n_step=n).n_step == expected
    assert collector.collect(n_step=n, exact=True).n_step == n


def test_batch_mode_arguments_are_checked() -> None:
    collector, _ = _collector([3, 4])
    with pytest.raises(ValueError, match="fragment alone"):
        collector.collect(n_step=4, fragment=2)
    with pytest.raises(ValueError, match="cannot be exact"):
        collector.collect(n_step=4, exact=True, complete_episodes=True)
    with pytest.raises(ValueError, match="fragment must be positive"):
        collector.collect(fragment=0)


def test_exact_counts_survive_a_collector_checkpoint() -> None:
    a, _ = _collector([5, 6, 7])
    a.collect(n_step=4, exact=True)  # env 0 is one step ahead
    state = a.state_dict()
    b, _ = _collector([5, 6, 7])
    b.load_state_dict(state)
    b.collect(n_step=2, exact=True)
    a.collect(n_step=2, exact=True)
    assert list(b._env_steps) == list(a._env_steps) == [2, 2, 2]


def test_the_asynchronous_collector_refuses_modes_that_step_envs_together() -> None:
    envs = make_vector_env("subproc", [lambda: _Countdown(3)] * 2, num_envs=2, seed=0,
                           wait_num=1)  # fmt: skip
    try:
        collector = AsyncCollector(_Zero(), envs, None)
        with pytest.raises(ValueError, match="synchronous"):
            collector.collect(fragment=2)
    finally:
        envs.close()


class _Rollouts:
    """Records, after every training collect, its step count and whether the buffer holds a
    running (unfinished) episode."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.unfinished: list[int] = []
        self.previous = 0

    @hookimpl
    def rlblocks_rollout_end(self, stats: dict, env_step: int, trainer: Any) -> None:
        self.steps.append(env_step - self.previous)
        self.previous = env_step
        self.unfinished.append(len(trainer.buffer.unfinished_index()))


def test_trainers_collect_in_the_configured_batch_mode() -> None:
    whole = _Rollouts()
    rlblocks.train(
        "ppo", env="CartPole-v1", seed=0, quiet=True, loggers=[], hooks=[whole],
        overrides=["trainer.batch_mode=complete_episodes", "trainer.max_env_steps=3000",
                   "trainer.step_per_collect=500", "buffer.size=3000", "env.num_envs=4"],
    )  # fmt: skip
    assert whole.unfinished and set(whole.unfinished) == {0}  # whole episodes only
    assert min(whole.steps) >= 500
    cut = _Rollouts()
    rlblocks.train(
        "dqn", env="CartPole-v1", seed=0, quiet=True, loggers=[], hooks=[cut],
        overrides=["trainer.rollout_fragment_length=3", "trainer.max_env_steps=1200",
                   "env.num_envs=5", "trainer.warmup_steps=0"],
    )  # fmt: skip
    assert set(cut.steps) == {15}  # 3 steps of each of 5 envs
    assert max(cut.unfinished) > 0  # episodes run on across collects


def test_batch_mode_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"trainer\.rollout_fragment_length"):
        rlblocks.train(
            "dqn",
            env="CartPole-v1",
            quiet=True,
            overrides=["trainer.batch_mode=complete_episodes", "trainer.rollout_fragment_length=3"],
        )
    with pytest.raises(ConfigError, match="did you mean 'complete_episodes'"):
        rlblocks.train(
            "dqn", env="CartPole-v1", quiet=True, overrides=["trainer.batch_mode=complete"]
        )
