"""AsyncCollector: only ready envs' results are used, rows never mix env ids, and finished envs
are reset before they act again."""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np
import pytest

import rlblocks
from rlblocks.collect import AsyncCollector
from rlblocks.contracts import Batch
from rlblocks.testing.env_checks import ProbeEnv

pytest.importorskip("rlblocks_env_shmem")
from rlblocks_env_dummy.dummy import DummyVectorEnv
from rlblocks_env_shmem.shmem import ShmemVectorEnv


class DelayedProbeEnv(ProbeEnv):
    """Probe env ``index`` (obs ``[index, t, resets, last_action, noise]``) whose steps take
    ``delay`` seconds, so envs in different workers come back out of order."""

    def __init__(self, index: int, delay: float) -> None:
        super().__init__(index)
        self.delay = delay

    def step(self, action: Any) -> Any:
        if self.delay:
            time.sleep(self.delay)
        return super().step(action)


class IndexPolicy:
    """Acts ``(index + t) % 7`` from the observation, so a misrouted action is visible."""

    training = False

    def __call__(self, batch: Batch, state: Any = None) -> Batch:
        obs = np.asarray(batch.obs)
        act = (obs[:, 0] + obs[:, 1]).astype(np.int64) % 7
        return Batch(act=act, policy=Batch(logit=obs[:, 0].astype(np.float32)))

    def map_action(self, act: Any) -> Any:
        return act

    def map_action_inverse(self, act: Any) -> Any:
        return act


def _envs(delays: list[float]) -> ShmemVectorEnv:
    fns = [functools.partial(DelayedProbeEnv, i, d) for i, d in enumerate(delays)]
    return ShmemVectorEnv(fns, num_workers=2, wait_num=1)


def _check_transitions(buf: Any) -> np.ndarray:
    data = buf[np.arange(len(buf))]
    obs, nxt = np.asarray(data.obs), np.asarray(data.obs_next)
    assert (obs[:, 0] == nxt[:, 0]).all(), "obs and obs_next of a row come from different envs"
    assert (nxt[:, 1] == obs[:, 1] + 1).all(), "a transition spans two episodes or skips a step"
    assert (nxt[:, 2] == obs[:, 2]).all(), "a transition spans a reset"
    act = np.asarray(data.act)
    assert (act == nxt[:, 3]).all(), "the stored action is not the one the env received"
    assert (act == (obs[:, 0] + obs[:, 1]) % 7).all(), "the stored action is another env's"
    assert (np.asarray(data.policy.logit) == obs[:, 0]).all(), "policy output of another env"
    return obs


def test_async_collector_uses_only_ready_envs_and_keeps_rows_per_env() -> None:
    # worker 0 (envs 0, 1) is fast, worker 1 (envs 2, 3) slow: the fast envs step more often
    with _envs([0.0, 0.0, 0.03, 0.03]) as envs:
        buf = rlblocks.make_buffer("replay", size=1000, num_envs=4)
        collector = AsyncCollector(IndexPolicy(), envs, buf, seed=0)
        stats = collector.collect(n_step=60)
        assert stats.n_step >= 60
        obs = _check_transitions(buf)
        counts = np.bincount(obs[:, 0].astype(int), minlength=4)
        assert counts[0] > counts[2], f"fast envs should have stepped more: {counts.tolist()}"
        # a second call picks up the envs still in flight
        collector.collect(n_step=20)
        _check_transitions(buf)


def test_async_collector_collects_exactly_n_episode_whole_episodes() -> None:
    with _envs([0.0, 0.01, 0.0, 0.01]) as envs:
        buf = rlblocks.make_buffer("replay", size=1000, num_envs=4)
        stats = AsyncCollector(IndexPolicy(), envs, buf).collect(n_episode=7)
        assert stats.n_episode == 7
        # probe env i's episodes last 2 + i steps
        assert set(stats.lengths.tolist()) <= {2, 3, 4, 5}
        assert stats.n_step == int(stats.lengths.sum())
        _check_transitions(buf)
        assert not envs._in_flight.any(), "no step may stay in flight after complete episodes"


def test_async_collector_falls_back_to_sync_for_in_process_backend() -> None:
    envs = DummyVectorEnv([functools.partial(ProbeEnv, i) for i in range(3)])
    buf = rlblocks.make_buffer("replay", size=200, num_envs=3)
    collector = AsyncCollector(IndexPolicy(), envs, buf)
    assert not collector.is_async
    stats = collector.collect(n_step=30)
    assert stats.n_step == 30
    _check_transitions(buf)


def test_async_collector_random_actions_without_policy() -> None:
    with _envs([0.0] * 4) as envs:
        stats = AsyncCollector(None, envs, None, seed=1).collect(n_step=40, random=True)
        assert stats.n_step >= 40 and stats.n_episode > 0


class NaNRewardProbeEnv(DelayedProbeEnv):
    """Probe env whose step ``t == 3`` returns a NaN reward (env 1 only: its episodes end
    there, so every episode of env 1 ends on one)."""

    def step(self, action: Any) -> Any:
        obs, rew, term, trunc, info = super().step(action)
        if self.index == 1 and obs[1] == 3:
            rew = float("nan")
        return obs, rew, term, trunc, info


def test_async_collector_names_the_env_that_returned_a_non_finite_reward() -> None:
    from rlblocks.contracts import NonFiniteError

    fns = [functools.partial(NaNRewardProbeEnv, i, 0.002 * i) for i in range(4)]
    envs = ShmemVectorEnv(fns, num_workers=2, wait_num=1)
    buf = rlblocks.ReplayBuffer(200, num_envs=4)
    try:
        collector = AsyncCollector(IndexPolicy(), envs, buf, seed=0)
        with pytest.raises(NonFiniteError, match=r"at index 1 returned the reward nan from step"):
            collector.collect(n_step=200)
        assert not np.isnan(np.asarray(buf[np.arange(len(buf))].rew)).any()
    finally:
        envs.close()


class InfoProbeEnv(DelayedProbeEnv):
    """DelayedProbeEnv whose step info names its env and step, to follow infos through
    out-of-order workers."""

    def step(self, action: Any) -> Any:
        obs, rew, terminated, truncated, _ = super().step(action)
        return obs, rew, terminated, truncated, {"env": self.index, "t": int(obs[1])}


def test_async_collector_stores_each_env_s_own_infos() -> None:
    fns = [functools.partial(InfoProbeEnv, i, d) for i, d in enumerate([0.0, 0.0, 0.02, 0.02])]
    with ShmemVectorEnv(fns, num_workers=2, wait_num=1) as envs:
        buf = rlblocks.make_buffer("replay", size=1000, num_envs=4)
        AsyncCollector(IndexPolicy(), envs, buf, seed=0, info_keys=["env", "t"]).collect(n_step=40)
        rows = buf[np.arange(len(buf))]
        obs_next = np.asarray(rows.obs_next)
        assert np.array_equal(rows.info.env, obs_next[:, 0])
        assert np.array_equal(rows.info.t, obs_next[:, 1])


def test_drain_stores_the_steps_in_flight_so_a_synchronous_collector_can_take_over() -> None:
    from rlblocks.collect import Collector

    # worker 1 (envs 2, 3) is slow: an n_step collect returns with its steps in flight
    with _envs([0.0, 0.0, 0.1, 0.1]) as envs:
        buf = rlblocks.make_buffer("replay", size=1000, num_envs=4)
        collector = AsyncCollector(IndexPolicy(), envs, buf, seed=0)
        stats = collector.collect(n_step=12)
        flying = collector.in_flight
        assert len(flying) and envs._in_flight[flying].all()
        before = len(buf)
        drained = collector.drain()
        # every step in flight came back into the buffer, nothing is left in flight
        assert drained.n_step == len(flying) and len(buf) == before + drained.n_step
        assert not envs._in_flight.any() and not len(collector.in_flight)
        assert collector.total_steps == stats.n_step + drained.n_step
        last = buf[np.arange(before, len(buf))]
        assert sorted(np.asarray(last.obs)[:, 0].astype(int).tolist()) == sorted(flying.tolist())
        _check_transitions(buf)
        assert collector.drain().n_step == 0  # nothing left: a no-op
        # the async collector goes on from where each env is (no step is lost or repeated)
        collector.collect(n_step=20)
        _check_transitions(buf)
        collector.drain()
        # a synchronous collector on the same envs can reset and step them
        sync_buf = rlblocks.make_buffer("replay", size=100, num_envs=4)
        assert Collector(IndexPolicy(), envs, sync_buf).collect(n_episode=4).n_episode == 4
        _check_transitions(sync_buf)
