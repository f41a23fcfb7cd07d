"""Trajectory views: shifts parsed, training views from episode links, acting views per env, and
the views a policy trains on equal to those it acted on (sync and async collectors, on-policy
buffer clears, ring overwrites, declared spaces)."""

from __future__ import annotations

import functools
import time
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.algo import BasePolicy, OnPolicyConfig, OnPolicyPolicy
from rlblocks.collect import AsyncCollector, Collector
from rlblocks.contracts import (
    STORED_PREFIX,
    ActingViews,
    Batch,
    ConfigError,
    ViewRequirement,
    parse_shift,
    stored_key,
    training_views,
)
from rlblocks.replay import ReplayBuffer
from rlblocks.testing.env_checks import ProbeEnv, probe_env_fns
from rlblocks.trainers import OnPolicyTrainer
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


def test_future_obs_views_read_obs_next_where_an_episode_ends() -> None:
    # RLlib's next-observation view: o_{t+1} is o'_t, the observation an episode ended with
    # (env 0's terminal step t=2, obs_next 3) and the newest of a running one (t=3, 4) included
    buf = two_env_buffer()
    idx = buf.sample_index(0)
    env0 = idx[buf.env_id[idx] == 0]
    views = training_views(
        buf,
        env0,
        {
            "next_obs": ViewRequirement("obs", shift=1),
            "ahead": ViewRequirement("obs", shift="0:2"),
            "ahead_edge": ViewRequirement("obs", shift=2, pad="edge"),
        },
    )
    assert views["next_obs"][:, 0].tolist() == [1, 2, 3, 4]
    assert np.array_equal(views["next_obs"], buf.obs_next[env0])
    # two ahead exists inside the episode only; past its end zeros, or its last observation
    assert views["ahead"][:, :, 0].tolist() == [[0, 1, 2], [1, 2, 3], [2, 3, 0], [3, 4, 0]]
    assert views["ahead_edge"][:, 0].tolist() == [2, 3, 3, 4]

    # a truncated end and a Dict observation's sub-key read their obs_next the same way
    dict_buf = ReplayBuffer(8)
    for t, last in enumerate([1, 12, 3]):  # step 1 ends truncated with obs 12
        dict_buf.add({"obs": {"x": np.float32(t)}, "act": 0, "rew": 0.0, "terminated": False,
                      "truncated": t == 1, "obs_next": {"x": np.float32(last)}})  # fmt: skip
    rows = dict_buf.sample_index(0)
    got = training_views(dict_buf, rows, {"nx": ViewRequirement("obs.x", shift=1)})
    assert got["nx"].tolist() == [1.0, 12.0, 3.0]  # 12: the truncated episode's last obs


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


def test_acting_views_changed_after_the_collector_was_built_are_refused_by_name() -> None:
    # RLlib lets views be set after a policy is built; a collector's per-env histories are
    # made for the acting views it saw, so a later acting view must not be silently ignored
    policy = ViewPolicy()
    envs = DummyVectorEnv([lambda: CountEnv(3)])
    collector = Collector(policy, envs, ReplayBuffer(64))
    collector.collect(n_step=2)
    # views for training only may come and go
    policy.view_requirements["next_obs"] = ViewRequirement("obs", shift=1, used_for_acting=False)
    collector.collect(n_step=2)
    policy.view_requirements["prev_obs"] = ViewRequirement("obs", shift=-1)
    with pytest.raises(ConfigError, match=r"changed after this collector was built \(added "
                                          r"'prev_obs'\).*before building the Collector"):
        collector.collect(n_step=2)
    del policy.view_requirements["prev_obs"]
    policy.view_requirements["prev_act"] = ViewRequirement("act", shift=[-2, -1])
    with pytest.raises(ConfigError, match=r"\(changed 'prev_act'\)"):
        collector.collect(n_step=2)
    assert len(policy.seen) == 4  # nothing was collected by the refused calls


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


# -- training views equal acting views, wherever the transitions were collected ---------------
# ProbeEnv i: obs [i, t, resets, last_action, noise] (float64), episodes of 2 + i steps, reward
# 10 * i + t; (i, resets, t) names one step of one env, so acting and training rows can be paired.
ACTING_AND_TRAINING = {
    "prev_act": ViewRequirement("act", shift=-1),
    "prev_rew": ViewRequirement("rew", shift=-1),
    "obs_stack": ViewRequirement("obs", shift="-2:0"),
    "act_pair": ViewRequirement("act", shift=[-2, -1]),
    "next_act": ViewRequirement("act", shift=1, used_for_acting=False),
}


def _step_key(obs: np.ndarray) -> tuple[int, int, int]:
    return int(obs[0]), int(obs[2]), int(obs[1])


def record_acting(policy: Any, batch: Batch) -> None:
    """Remember the acting views of every row of ``batch`` under its step."""
    names = [n for n, r in policy.view_requirements.items() if r.used_for_acting]
    for row, o in enumerate(np.asarray(batch.obs)):
        key = _step_key(o)
        assert key not in policy.acting, f"step {key} acted on twice"
        policy.acting[key] = {n: np.asarray(batch[n][row]).copy() for n in names}


class ViewRecorder(BasePolicy):
    """Acts ``(i + t + resets) % 7`` on probe observations and remembers, per step, the acting
    views it was given and, for every row of every update, the training views."""

    def __init__(self, requirements: dict[str, ViewRequirement] | None = None) -> None:
        probe = ProbeEnv(0)
        super().__init__(probe.observation_space, probe.action_space)
        self.view_requirements = dict(requirements or ACTING_AND_TRAINING)
        self.acting: dict[tuple[int, int, int], dict[str, np.ndarray]] = {}
        self.trained: list[tuple[tuple[int, int, int], dict[str, np.ndarray]]] = []
        self.learn_keys: set[str] = set()

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        record_acting(self, batch)
        obs = np.asarray(batch.obs)
        act = (obs[:, 0] + obs[:, 1] + obs[:, 2]).astype(np.int64) % 7
        return Batch(act=act, state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        self.learn_keys |= set(batch.keys())
        names = [n for n, r in self.view_requirements.items() if r.used_for_training]
        for row, o in enumerate(np.asarray(batch.obs)):
            self.trained.append((_step_key(o), {n: np.asarray(batch[n][row]) for n in names}))
        return {}


def assert_training_saw_acting(policy: Any) -> int:
    """Every trained row's views equal, in values and dtype, those the policy acted on; returns
    the number of trained rows."""
    assert policy.trained, "nothing was trained on"
    for key, views in policy.trained:
        for name, acted in policy.acting[key].items():
            if name not in views:
                continue
            got = views[name]
            assert got.dtype == acted.dtype, f"{name} at {key}: {acted.dtype} vs {got.dtype}"
            assert np.array_equal(got, acted), f"{name} at step {key}: acted {acted}, trained {got}"
    return len(policy.trained)


def check_probe_views(by_step: dict[tuple[int, int, int], dict[str, np.ndarray]]) -> None:
    """Views (by step) are the probe env's own history: right, not just consistent."""
    assert by_step
    for (i, resets, t), views in by_step.items():
        stack = views["obs_stack"]
        for k, shift in enumerate((-2, -1, 0)):
            if t + shift < 0:
                assert not stack[k].any(), f"env {i} t={t}: a step before the episode is not zero"
            else:
                assert stack[k, :3].tolist() == [i, t + shift, resets]
        prev = stack[2, 3] if t >= 1 else 0  # a probe obs holds the last action taken
        assert views["prev_act"] == prev
        assert views["act_pair"].tolist() == [stack[1, 3] if t >= 2 else 0, prev]
        assert views["prev_rew"] == (10 * i + t if t >= 1 else 0)


def test_training_views_equal_acting_views_after_on_policy_buffer_clears() -> None:
    # four probe envs, one step each per collect: after the first clear every episode in the
    # buffer began before it, so the buffer's links hold none of the history acting saw
    policy = ViewRecorder()
    buf = ReplayBuffer(16, num_envs=4)
    collector = Collector(policy, DummyVectorEnv(probe_env_fns(4)), buf, seed=0)
    for _ in range(8):
        collector.collect(n_step=4)
        policy.update(0, buf)
        buf.reset(keep_statistics=True)
    assert assert_training_saw_acting(policy) == 32
    check_probe_views(policy.acting)
    assert sum(t >= 2 for (_, _, t), _ in policy.trained) >= 8  # histories crossed clears
    # the stored copies come back under the views' own names only
    assert not any(k.startswith(STORED_PREFIX) for k in policy.learn_keys)
    assert {"prev_act", "obs_stack", "next_act"} <= policy.learn_keys


def test_training_views_equal_acting_views_after_the_ring_overwrote_episode_starts() -> None:
    # 6- and 7-step episodes in an 8-slot buffer: the oldest stored steps lost their past
    policy = ViewRecorder()
    buf = ReplayBuffer(8, num_envs=2)
    envs = DummyVectorEnv([functools.partial(ProbeEnv, i) for i in (4, 5)])
    Collector(policy, envs, buf, seed=0).collect(n_step=22)
    policy.update(0, buf)
    assert assert_training_saw_acting(policy) == 8
    stored = {key for key, _ in policy.trained}
    cut = [(i, ep, t) for i, ep, t in stored if t >= 1 and (i, ep, t - 1) not in stored]
    assert cut, "the test needs rows whose previous step was overwritten"


def test_random_warm_up_steps_store_the_views_the_policy_would_have_seen() -> None:
    policy = ViewRecorder()
    buf = ReplayBuffer(64, num_envs=3)
    collector = Collector(policy, DummyVectorEnv(probe_env_fns(3)), buf, seed=0)
    collector.collect(n_step=9, random=True)
    assert not policy.acting  # the policy never ran ...
    collector.collect(n_step=9)
    policy.update(0, buf)
    # ... yet every row has views: the right ones for warm-up rows, the acted-on ones after
    assert buf.get(buf.sample_index(0), stored_key("prev_act")).shape == (18,)
    warm_up = {key: views for key, views in policy.trained if key not in policy.acting}
    assert len(warm_up) == 9
    check_probe_views(warm_up)
    policy.trained = [(key, views) for key, views in policy.trained if key in policy.acting]
    assert assert_training_saw_acting(policy) == 9


class OnPolicyViewRecorder(OnPolicyPolicy):
    """A small actor-critic that records acting views and the views its rollout carries."""

    def __init__(self) -> None:
        probe = ProbeEnv(0)
        config = OnPolicyConfig(hidden_sizes=[8])
        super().__init__(probe.observation_space, probe.action_space, config)
        self.view_requirements = dict(ACTING_AND_TRAINING)
        self.acting: dict[tuple[int, int, int], dict[str, np.ndarray]] = {}
        self.trained: list[tuple[tuple[int, int, int], dict[str, np.ndarray]]] = []
        self._keys: list[tuple[int, int, int]] = []

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        record_acting(self, batch)
        return super().forward(batch, state)

    def process_fn(self, batch: Batch, buffer: Any, indices: np.ndarray) -> Batch:
        self._keys = [_step_key(o) for o in np.asarray(batch.obs)]
        return super().process_fn(batch, buffer, indices)

    def learn(self, batch: Batch, batch_size: int = 0, **kwargs: Any) -> dict[str, float]:
        data = self.rollout(batch)
        for mb in self.minibatches(data, batch_size):  # views travel with minibatches
            assert mb["prev_act"].shape == mb["act"].shape
        names = [n for n in self.view_requirements if n in data]
        for row, key in enumerate(self._keys):
            self.trained.append((key, {n: data[n][row].cpu().numpy() for n in names}))
        return {}


def test_on_policy_trainer_learns_on_the_views_the_policy_acted_on() -> None:
    policy = OnPolicyViewRecorder()
    buf = ReplayBuffer(16, num_envs=4)
    collector = Collector(policy, DummyVectorEnv(probe_env_fns(4)), buf, seed=0)
    trainer = OnPolicyTrainer(
        policy, collector, None, buf, step_per_collect=4, repeat_per_collect=1,
        max_env_steps=32, test_interval=1000, batch_size=2,
    )  # fmt: skip
    trainer.run()
    assert len(buf) == 0, "the trainer clears the buffer after each update"
    assert assert_training_saw_acting(policy) == 32
    assert {"prev_act", "prev_rew", "obs_stack", "act_pair", "next_act"} <= set(
        policy.trained[-1][1]
    )


def test_a_requirements_space_types_its_training_views_too() -> None:
    f64 = gym.spaces.Box(-np.inf, np.inf, (), np.float64)
    policy = ViewRecorder(
        {
            "prev_rew": ViewRequirement("rew", shift=-1, space=f64),
            "next_rew": ViewRequirement("rew", shift=1, used_for_acting=False, space=f64),
            "next_rew32": ViewRequirement("rew", shift=1, used_for_acting=False),
            "obs_stack": ViewRequirement("obs", shift="-2:0"),
        }
    )
    buf = ReplayBuffer(32, num_envs=2)
    Collector(policy, DummyVectorEnv(probe_env_fns(2)), buf, seed=0).collect(n_step=10)
    policy.update(0, buf)
    assert assert_training_saw_acting(policy) == 10
    views = policy.trained[0][1]
    assert views["prev_rew"].dtype == np.float64  # declared, acting and training
    assert views["next_rew"].dtype == np.float64  # declared, training only
    assert views["next_rew32"].dtype == np.float32  # rewards default to float32 scalars
    assert views["obs_stack"].dtype == np.float64  # the env's observation space
    wrong = {"x": ViewRequirement("obs", shift=-1, used_for_acting=False, space=f64)}
    with pytest.raises(ConfigError, match="declared space has shape"):
        training_views(buf, buf.sample_index(0), wrong)


class SlowProbeEnv(ProbeEnv):
    """A probe env whose steps take ``delay`` seconds, so envs finish out of order."""

    def __init__(self, index: int, delay: float) -> None:
        super().__init__(index)
        self.delay = delay

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return super().step(action)


def test_async_collector_gives_each_env_the_views_of_the_sync_collector() -> None:
    pytest.importorskip("rlblocks_env_shmem")
    from rlblocks_env_shmem.shmem import ShmemVectorEnv

    delays = (0.0, 0.004, 0.0, 0.012)  # worker 1 (envs 2, 3) lags: envs come back in any order
    fns = [functools.partial(SlowProbeEnv, i, d) for i, d in enumerate(delays)]
    async_policy = ViewRecorder()
    buf = ReplayBuffer(256, num_envs=4)
    with ShmemVectorEnv(fns, num_workers=2, wait_num=1) as envs:
        collector = AsyncCollector(async_policy, envs, buf, seed=0, wait_num=1)
        assert collector.is_async
        collector.collect(n_step=40)
        collector.collect(n_step=20)  # steps in flight carry over between calls
    async_policy.update(0, buf)
    assert assert_training_saw_acting(async_policy) == len(buf)
    check_probe_views(async_policy.acting)
    counts = np.bincount([k[0] for k in async_policy.acting], minlength=4)
    assert counts[0] > counts[3], f"envs should have stepped unevenly: {counts.tolist()}"

    sync_policy = ViewRecorder()
    sync = Collector(sync_policy, DummyVectorEnv(probe_env_fns(4)), None, seed=0)
    sync.collect(n_step=4 * int(counts.max()) + 4)
    shared = async_policy.acting.keys() & sync_policy.acting.keys()
    assert len(shared) == len(async_policy.acting)
    for key in shared:
        for name, value in sync_policy.acting[key].items():
            got = async_policy.acting[key][name]
            assert got.dtype == value.dtype and np.array_equal(got, value), (name, key)


# -- Dict observations: whole-observation views, key views, frame stacks ----------------------
class DictCountEnv(gym.Env):
    """``{"pos": [t], "img": [[t, -t]]}`` (float32) over episodes of ``length`` steps."""

    observation_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(0, 1000, (1,), np.float32),
            "img": gym.spaces.Box(-1000, 1000, (1, 2), np.float32),
        }
    )
    action_space = gym.spaces.Discrete(5)

    def __init__(self, length: int) -> None:
        self.length, self.t = length, 0

    def _obs(self) -> dict[str, np.ndarray]:
        t = np.float32(self.t)
        return {"pos": np.array([t], np.float32), "img": np.array([[t, -t]], np.float32)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= self.length, False, {}

    def snapshot_state(self) -> dict[str, int]:
        return {"t": self.t}

    def restore_state(self, state: dict[str, int]) -> None:
        self.t = int(state["t"])


class DictViewPolicy(BasePolicy):
    """Acts ``t % 5`` and keeps the acting views of each step by ``(env, episode, t)``."""

    def __init__(self, requirements: dict[str, ViewRequirement]) -> None:
        super().__init__(DictCountEnv.observation_space, DictCountEnv.action_space)
        self.view_requirements = requirements
        self.acting: dict[tuple[int, int, int], dict[str, Any]] = {}
        self.episode = [0, 0]
        self.seen: list[Batch] = []

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        self.seen.append(batch)
        pos = np.asarray(batch.obs["pos"] if "pos" in batch.obs else batch.obs["pos"][:, -1])
        return Batch(act=pos.reshape(len(pos), -1)[:, -1].astype(np.int64) % 5, state=state)

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, float]:
        return {}


DICT_VIEWS = {
    "frames": ViewRequirement("obs", shift="-2:0", pad="edge"),  # the whole Dict observation
    "prev_pos": ViewRequirement("obs.pos", shift=-1),  # one key of it
    "prev_act": ViewRequirement("act", shift=-1),
}


def test_acting_views_of_a_dict_observation_stack_each_key_and_view_one_key() -> None:
    policy = DictViewPolicy(dict(DICT_VIEWS))
    envs = DummyVectorEnv([lambda: DictCountEnv(3), lambda: DictCountEnv(5)])
    buf = ReplayBuffer(64, num_envs=2)
    Collector(policy, envs, buf).collect(n_step=10)
    stack_pos = np.stack([np.asarray(b.frames["pos"])[:, :, 0] for b in policy.seen])
    stack_img = np.stack([np.asarray(b.frames["img"])[:, :, 0, 1] for b in policy.seen])
    prev_pos = np.stack([np.asarray(b.prev_pos)[:, 0] for b in policy.seen])
    # env 0 (3-step episodes): obs 0,1,2 | 0,1, the first observation repeated ("edge")
    assert stack_pos[:, 0].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [0, 0, 0], [0, 0, 1]]
    assert stack_pos[:, 1].tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert np.array_equal(stack_img, -stack_pos)  # the other key, stacked alike
    assert prev_pos[:, 0].tolist() == [0, 0, 1, 0, 0]  # zeros before the episode
    assert prev_pos[:, 1].tolist() == [0, 0, 1, 2, 3]
    assert policy.seen[0].frames["pos"].dtype == np.float32
    # training reads back exactly what acting saw, the Dict view included
    idx = buf.sample_index(0)
    batch = buf[idx]
    views = training_views(buf, idx, policy.view_requirements, DictCountEnv.observation_space,
                           DictCountEnv.action_space, batch=batch)  # fmt: skip
    pos = np.asarray(batch.obs["pos"])[:, 0]
    for row, t in enumerate(pos.astype(int)):
        want = [max(t - 2, 0), max(t - 1, 0), t]
        assert np.asarray(views["frames"]["pos"])[row, :, 0].tolist() == want
        assert np.asarray(views["prev_pos"])[row, 0] == max(t - 1, 0)


def test_a_collector_stacks_the_frames_of_a_dict_observation_as_the_buffer_does() -> None:
    from rlblocks.run import stacked_space

    space = stacked_space(DictCountEnv.observation_space, 3)
    assert isinstance(space, gym.spaces.Dict) and space["img"].shape == (3, 1, 2)
    policy = DictViewPolicy({})
    envs = DummyVectorEnv([lambda: DictCountEnv(4), lambda: DictCountEnv(6)])
    buf = ReplayBuffer(64, num_envs=2, stack_num=3)
    Collector(policy, envs, buf, frame_stack=3).collect(n_step=12)
    acted = {}
    for batch in policy.seen:
        for row in range(len(batch.obs["pos"])):
            frames = np.asarray(batch.obs["pos"])[row, :, 0]
            acted.setdefault(tuple(frames.tolist()), np.asarray(batch.obs["img"])[row])
    sampled = buf[buf.sample_index(0)]
    for row in range(len(sampled.obs["pos"])):
        frames = tuple(np.asarray(sampled.obs["pos"])[row, :, 0].tolist())
        assert frames in acted, f"the buffer stacked {frames}, which acting never saw"
        assert np.array_equal(np.asarray(sampled.obs["img"])[row], acted[frames])


def test_dict_view_histories_survive_a_collector_checkpoint() -> None:
    from rlblocks.run._checkpoint import from_plain, to_plain

    envs = DummyVectorEnv([lambda: DictCountEnv(7)])
    collector = Collector(DictViewPolicy(dict(DICT_VIEWS)), envs, ReplayBuffer(64))
    collector.collect(n_step=4)
    saved = from_plain(to_plain(collector.state_dict()))
    other = Collector(DictViewPolicy(dict(DICT_VIEWS)), DummyVectorEnv([lambda: DictCountEnv(7)]),
                      ReplayBuffer(64))  # fmt: skip
    assert other.load_state_dict(saved) == ""  # the episode continues, views and all
    theirs, ours = other._views.history, collector._views.history
    assert theirs.keys() == ours.keys()
    assert np.array_equal(theirs["obs@edge"]["img"], ours["obs@edge"]["img"])
    assert np.array_equal(theirs["obs.pos"], ours["obs.pos"])
    b1, b2 = collector._views.build(np.arange(1)), other._views.build(np.arange(1))
    assert np.array_equal(b1["frames"]["pos"], b2["frames"]["pos"])


def test_views_that_cannot_be_kept_while_acting_say_what_to_do() -> None:
    tuple_space = gym.spaces.Tuple([gym.spaces.Box(0, 1, (2,)), gym.spaces.Discrete(3)])
    with pytest.raises(ConfigError, match=r"need a Box, discrete or Dict space.*'obs.KEY'"):
        ActingViews({"s": ViewRequirement("obs", shift=-1)}, 2, tuple_space, gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"a Dict observation's keys as obs.KEY"):
        ActingViews({"a": ViewRequirement("act.x", shift=-1)}, 2, DictCountEnv.observation_space,
                    gym.spaces.Discrete(2))  # fmt: skip
