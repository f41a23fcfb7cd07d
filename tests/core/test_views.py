"""Trajectory views: shifts parsed, training views from episode links, acting views per env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.batch import Batch
from rlblocks.buffer import ReplayBuffer
from rlblocks.collector import Collector
from rlblocks.errors import ConfigError
from rlblocks.views import ActingViews, ViewRequirement, parse_shift, training_views
from rlblocks_env_dummy.dummy import DummyVectorEnv


def test_shift_forms() -> None:
    assert parse_shift(-1) == ((-1,), False)
    assert parse_shift([-2, -1]) == ((-2, -1), True)
    assert parse_shift("-3:0") == ((-3, -2, -1, 0), True)
    for bad in ("0:-3", "a:b", "-3", []):
        with pytest.raises(ConfigError):
            parse_shift(bad)
    with pytest.raises(ConfigError, match="range"):
        ViewRequirement("obs", shift="2:1")


def two_env_buffer() -> ReplayBuffer:
    """env 0: episode of 3 steps (obs 0,1,2; act 10,11,12) then one more step (obs 3, act 13);
    env 1: obs 100.., act 200..; all steps interleaved in one storage."""
    buf = ReplayBuffer(32, num_envs=2)
    for t in range(4):
        buf.add(
            {
                "obs": np.array([[t], [100 + t]], np.float32),
                "act": np.array([10 + t, 200 + t]),
                "rew": np.array([float(t), 1.0]),
                "terminated": np.array([t == 2, False]),
                "truncated": np.array([False, False]),
                "obs_next": np.array([[t + 1], [101 + t]], np.float32),
            }
        )
    return buf


def test_training_views_follow_episode_links_and_zero_outside() -> None:
    buf = two_env_buffer()
    idx = buf.sample_index(0)  # time order: (env0 t0, env1 t0, env0 t1, ...)
    env0 = idx[buf.env_id[idx] == 0]
    env1 = idx[buf.env_id[idx] == 1]
    views = training_views(
        buf,
        env0,
        {
            "prev_act": ViewRequirement("act", shift=-1),
            "obs_window": ViewRequirement("obs", shift="-2:0"),
            "next_act": ViewRequirement("act", shift=1),
        },
    )
    # episode boundary after t=2: t=3 starts a new episode
    assert views["prev_act"].tolist() == [0, 10, 11, 0]
    assert views["obs_window"][:, :, 0].tolist() == [
        [0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 0, 3]
    ]
    assert views["next_act"].tolist() == [11, 12, 0, 0]
    other = training_views(buf, env1, {"prev_act": ViewRequirement("act", shift=-1)})
    assert other["prev_act"].tolist() == [0, 200, 201, 202]


def test_views_skip_plain_columns_and_training_only_flags() -> None:
    buf = two_env_buffer()
    views = training_views(
        buf,
        buf.sample_index(0),
        {"obs": ViewRequirement(), "x": ViewRequirement("act", -1, used_for_training=False)},
    )
    assert views == {}


def test_unknown_column_names_the_stored_keys() -> None:
    buf = two_env_buffer()
    with pytest.raises(ConfigError, match="stores no 'returns'"):
        training_views(buf, buf.sample_index(0), {"r": ViewRequirement("returns", -1)})


class CountEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 1000, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(5)

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), float(10 * self.t), self.t >= self.length, False, {}


class ViewPolicy:
    """Acts with action = step counter % 5 and records the batches it is given."""

    training = True
    updating = False

    def __init__(self) -> None:
        self.view_requirements = {
            "prev_act": ViewRequirement("act", shift=-1),
            "prev_rew": ViewRequirement("rew", shift=-1),
            "obs_stack": ViewRequirement("obs", shift="-2:0"),
            "next_act": ViewRequirement("act", shift=1, used_for_acting=False),
        }
        self.seen: list[Batch] = []

    def __call__(self, batch, state=None):
        self.seen.append(batch)
        return Batch(act=(batch.obs[:, 0].astype(np.int64) + 1) % 5)

    def exploration_noise(self, act, batch):
        return act

    def map_action(self, act):
        return act


def test_collector_feeds_acting_views_and_restarts_them_each_episode() -> None:
    policy = ViewPolicy()
    envs = DummyVectorEnv([lambda: CountEnv(3), lambda: CountEnv(5)])
    Collector(policy, envs, ReplayBuffer(64, num_envs=2)).collect(n_step=10)
    prev_act = np.stack([b.prev_act for b in policy.seen])
    prev_rew = np.stack([b.prev_rew for b in policy.seen])
    stack = np.stack([b.obs_stack[:, :, 0] for b in policy.seen])
    # env 0 (3-step episodes): obs 0,1,2 | 0,1
    assert prev_act[:, 0].tolist() == [0, 1, 2, 0, 1]
    assert prev_rew[:, 0].tolist() == [0.0, 10.0, 20.0, 0.0, 10.0]
    assert stack[:, 0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 0, 0], [0, 0, 1]]
    # env 1 (5-step episode) runs on without a reset
    assert stack[:, 1].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert "next_act" not in policy.seen[0]


def test_future_views_cannot_be_used_for_acting() -> None:
    space = gym.spaces.Box(0, 1, (1,))
    with pytest.raises(ConfigError, match="used_for_acting=False"):
        ActingViews({"a": ViewRequirement("act", shift=0)}, 2, space, gym.spaces.Discrete(2))


def test_policy_update_adds_training_views() -> None:
    from rlblocks_algo_dqn.dqn import DQNPolicy

    policy = DQNPolicy(gym.spaces.Box(0, 1000, (1,), np.float32), gym.spaces.Discrete(300))
    policy.view_requirements = {"prev_act": ViewRequirement("act", shift=-1)}
    seen = {}
    learn = policy.learn

    def spy(batch, **kw):
        seen["batch"] = batch
        return learn(batch, **kw)

    policy.learn = spy
    buf = two_env_buffer()
    policy.update(0, buf)
    batch = seen["batch"]
    expected = np.where(batch.obs[:, 0] % 100 == 0, 0, batch.act - 1)
    expected[(batch.obs[:, 0] == 3)] = 0  # first step of env 0's second episode
    assert batch.prev_act.tolist() == expected.tolist()


def test_a_requirements_space_shapes_its_acting_history() -> None:
    obs_space = gym.spaces.Box(-1, 1, (3,), np.float32)
    rew_space = gym.spaces.Box(-np.inf, np.inf, (), np.float64)
    views = ActingViews(
        {"prev_rew": ViewRequirement("rew", shift=-1, space=rew_space)},
        2, obs_space, gym.spaces.Discrete(2),
    )  # fmt: skip
    assert views.history["rew"].dtype == np.float64
    default = ActingViews(
        {"prev_rew": ViewRequirement("rew", shift=-1)}, 2, obs_space, gym.spaces.Discrete(2)
    )
    assert default.history["rew"].dtype == np.float32
    with pytest.raises(ConfigError, match="different spaces"):
        ActingViews(
            {
                "a": ViewRequirement("obs", shift=-1, space=obs_space),
                "b": ViewRequirement("obs", shift=-2, space=gym.spaces.Box(0, 1, (4,))),
            },
            2, obs_space, gym.spaces.Discrete(2),
        )  # fmt: skip
