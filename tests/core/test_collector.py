"""Collector: step and episode modes, env resets at episode ends, buffer writes, statistics."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError, NonFiniteError
from rlblocks.replay import ReplayBuffer
from rlblocks_env_dummy.dummy import DummyVectorEnv


class CountEnv(gym.Env):
    """obs = step counter; episode of env i lasts ``length`` steps, reward 1 per step.
    Ends by ``terminated`` on even ids and ``truncated`` on odd ones."""

    observation_space = gym.spaces.Box(0, 1000, (1,), dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, length: int, truncate: bool = False) -> None:
        self.length = length
        self.truncate = truncate
        self.t = 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        obs = np.array([self.t], dtype=np.float32)
        return obs, 1.0, end and not self.truncate, end and self.truncate, {}


class ConstPolicy:
    """Always action 1; records how it was called."""

    training = True
    updating = False

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: Batch, state=None):
        self.calls += 1
        return Batch(act=np.ones(len(batch.obs), dtype=np.int64))

    def exploration_noise(self, act, batch):
        return act

    def map_action(self, act):
        return act

    def map_action_inverse(self, act):
        return act


def make(lengths: list[int], size: int = 1000) -> tuple[Collector, ReplayBuffer, ConstPolicy]:
    envs = DummyVectorEnv(
        [lambda n=n, i=i: CountEnv(n, truncate=i % 2 == 1) for i, n in enumerate(lengths)]
    )
    buf = ReplayBuffer(size, num_envs=len(lengths))
    policy = ConstPolicy()
    return Collector(policy, envs, buf, seed=0), buf, policy


def test_n_step_collects_at_least_n_and_writes_every_step() -> None:
    collector, buf, _ = make([3, 5])
    stats = collector.collect(n_step=7)
    assert stats.n_step == 8  # 4 vector steps of 2 envs
    assert len(buf) == 8
    assert stats.n_episode == 1 and stats.returns.tolist() == [3.0]
    assert stats.lengths.tolist() == [3]


def test_episodes_continue_across_n_step_calls() -> None:
    collector, buf, _ = make([4])
    collector.collect(n_step=2)
    stats = collector.collect(n_step=2)
    assert stats.n_episode == 1 and stats.returns.tolist() == [4.0]
    assert buf.obs[:4, 0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_finished_env_is_reset_and_no_transition_spans_episodes() -> None:
    collector, buf, _ = make([2])
    collector.collect(n_step=6)
    obs = buf.obs[:6, 0].tolist()
    obs_next = buf.obs_next[:6, 0].tolist()
    assert obs == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert obs_next == [1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    assert buf.terminated[:6].tolist() == [False, True] * 3


def test_truncated_flag_is_stored() -> None:
    collector, buf, _ = make([3, 2])
    collector.collect(n_step=4)
    idx = buf.sample_index(0)
    env1 = idx[buf.env_id[idx] == 1] if hasattr(buf, "env_id") else idx[1::2]
    assert buf.truncated[env1].tolist() == [False, True]
    assert not buf.terminated[env1].any()


def test_n_episode_collects_exactly_n_whole_episodes() -> None:
    collector, _buf, _policy = make([3, 10, 2])
    stats = collector.collect(n_episode=5)
    assert stats.n_episode == 5
    assert len(stats.returns) == 5
    # every episode started is finished: returns equal the env lengths
    assert sorted(stats.returns.tolist()) == sorted(stats.lengths.astype(float).tolist())
    assert set(stats.lengths.tolist()) <= {3, 10, 2}
    # the long env runs one episode while the short ones fill the rest
    assert stats.n_step == int(stats.lengths.sum())


def test_n_episode_starts_fresh_episodes() -> None:
    collector, _, _ = make([5])
    collector.collect(n_step=3)  # leave an episode half done
    stats = collector.collect(n_episode=1)
    assert stats.lengths.tolist() == [5]


def test_random_actions_do_not_call_policy() -> None:
    collector, buf, policy = make([50, 50])
    collector.collect(n_step=20, random=True)
    assert policy.calls == 0
    assert set(np.unique(buf.act[: len(buf)]).tolist()) <= {0, 1}
    collector.collect(n_step=2)
    assert policy.calls == 1


def test_collect_without_buffer_only_counts() -> None:
    envs = DummyVectorEnv([lambda: CountEnv(4)] * 2)
    stats = Collector(ConstPolicy(), envs, None).collect(n_episode=4)
    assert stats.returns.tolist() == [4.0] * 4


def test_collect_argument_errors() -> None:
    collector, _, _ = make([3])
    with pytest.raises(ValueError, match="exactly one"):
        collector.collect()
    with pytest.raises(ValueError, match="exactly one"):
        collector.collect(n_step=1, n_episode=1)
    with pytest.raises(ValueError, match="positive"):
        collector.collect(n_step=0)


def test_recurrent_state_is_reset_at_episode_end() -> None:
    class CountingStatePolicy(ConstPolicy):
        def __call__(self, batch, state=None):
            n = len(batch.obs)
            state = np.zeros(n) if state is None else state
            self.seen = state.copy()
            return Batch(act=np.ones(n, dtype=np.int64), state=state + 1)

    envs = DummyVectorEnv([lambda: CountEnv(3)])
    policy = CountingStatePolicy()
    collector = Collector(policy, envs, None)
    states = []
    for _ in range(6):
        collector.collect(n_step=1)
        states.append(float(policy.seen[0]))
    # the state counts steps within an episode and restarts after each 3-step episode
    assert states == [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]


def test_reset_mid_episode_ends_the_episode_in_the_buffer() -> None:
    collector, buf, _ = make([10])
    collector.collect(n_step=3)
    collector.reset()
    collector.collect(n_step=2)
    idx = buf.sample_index(0)
    assert buf.truncated[idx].tolist() == [False, False, True, False, False]
    # the new episode does not link back into the cut one
    assert buf.prev(np.array([3]))[0] == 3
    assert buf.next(np.array([2]))[0] == 2


class NonFiniteOnce(gym.Wrapper):
    """Returns NaN (or inf) as the reward, or in the observation, at step ``at`` of its life."""

    def __init__(self, env: gym.Env, at: int, where: str, value: float = float("nan")) -> None:
        super().__init__(env)
        self.at, self.where, self.value, self.steps = at, where, value, 0

    def step(self, action):
        obs, rew, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.where == "reward":
                rew = self.value
            else:
                obs = obs.copy()
                obs[1] = self.value
        return obs, rew, terminated, truncated, info


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("reward", float("nan"), "returned the reward nan from step()"),
        ("reward", -float("inf"), "returned the reward -inf from step()"),
        ("obs", float("inf"), "returned an observation with NaN or infinite values from step()"),
    ],
)
def test_non_finite_env_output_stops_the_collect_naming_the_env(where, value, said) -> None:
    def factory(i: int):
        return lambda: NonFiniteOnce(gym.make("CartPole-v1"), 3 if i == 2 else 10**9, where, value)

    envs = DummyVectorEnv([factory(i) for i in range(4)])
    buf = ReplayBuffer(100, num_envs=4)
    collector = Collector(ConstPolicy(), envs, buf, seed=0)
    with pytest.raises(NonFiniteError, match=rf"env 'CartPole-v1' at index 2 {re.escape(said)}"):
        collector.collect(n_step=40)
    assert len(buf) == 8  # the bad step never reached the buffer


class ActionSpaceEnv(CountEnv):
    """CountEnv with another action space (and episodes of 7 steps)."""

    def __init__(self, action_space: gym.Space) -> None:
        super().__init__(7)
        self.action_space = action_space


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Discrete(3, start=-1),
        gym.spaces.MultiDiscrete([2, 3], start=[-1, 4]),
        gym.spaces.Box(-2.0, 3.0, (2,), dtype=np.float32),
    ],
)
def test_random_actions_fill_the_space_and_follow_the_seed(space) -> None:
    def run(seed: int) -> np.ndarray:
        envs = DummyVectorEnv([lambda: ActionSpaceEnv(space)] * 3)
        buf = ReplayBuffer(1000, num_envs=3)
        collector = Collector(None, envs, buf, seed=seed)
        collector.collect(n_step=300, random=True)  # every env active
        collector.collect(n_episode=2, random=True)  # two of three envs active
        return buf.act[: len(buf)].copy()

    acts = run(0)
    assert len(acts) == 300 + 14
    assert all(space.contains(np.asarray(a, dtype=space.dtype)) for a in acts)
    if isinstance(space, gym.spaces.Discrete):
        assert set(acts.tolist()) == {-1, 0, 1}
    elif isinstance(space, gym.spaces.MultiDiscrete):
        assert {tuple(a) for a in acts.tolist()} == {(i, j) for i in (-1, 0) for j in (4, 5, 6)}
    else:
        assert acts.shape == (314, 2) and acts.std(axis=0).min() > 1.0  # spread, not constant
    np.testing.assert_array_equal(acts, run(0))
    assert not np.array_equal(acts, run(1))


def _dqn(obs_space: gym.Space, act_space: gym.Space, **config):
    import rlblocks

    return rlblocks.make_policy("dqn", obs_space, act_space, config=config)


def test_default_dqn_acts_greedily_with_exactly_its_network() -> None:
    import torch

    space = gym.spaces.Box(-np.inf, np.inf, (4,), dtype=np.float32)
    policy = _dqn(space, gym.spaces.Discrete(3, start=2))
    policy.eval()  # eps_test = 0: greedy
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    with torch.inference_mode():
        out = policy(Batch(obs=obs))
        q = policy.model(torch.as_tensor(obs))
    assert torch.equal(out.logits, q)  # the same computation, not just close
    # it acts by index from 0 (what it stores and learns); map_action sends start + index
    assert out.act.tolist() == q.argmax(dim=1).numpy().tolist()
    assert policy.map_action(out.act).tolist() == (q.argmax(dim=1).numpy() + 2).tolist()
    # with autograd on, the logits still carry the graph
    assert policy(Batch(obs=obs)).logits.requires_grad


def test_default_dqn_runs_hooks_registered_on_its_network() -> None:
    space = gym.spaces.Box(-1, 1, (4,), dtype=np.float32)
    policy = _dqn(space, gym.spaces.Discrete(2))
    seen: list[tuple[int, ...]] = []
    handle = policy.model.body[2].register_forward_hook(
        lambda _m, _args, out: seen.append(tuple(out.shape))
    )
    policy(Batch(obs=np.zeros((5, 4), np.float32)))
    assert seen == [(5, 128)]
    handle.remove()
    policy(Batch(obs=np.zeros((5, 4), np.float32)))
    assert seen == [(5, 128)]


def test_dqn_exploration_through_the_collector_picks_every_action_alike() -> None:
    envs = DummyVectorEnv([lambda: ActionSpaceEnv(gym.spaces.Discrete(3, start=1))] * 4)
    policy = _dqn(envs.observation_space, envs.action_space)
    policy.seed(0)
    policy.train()  # env_step 0: epsilon 1, every action random
    buf = ReplayBuffer(4000, num_envs=4)
    Collector(policy, envs, buf).collect(n_step=3000)
    counts = np.bincount(buf.act[: len(buf)], minlength=3) / len(buf)  # indices stored
    assert np.abs(counts - 1 / 3).max() < 0.04


def test_one_gymnasium_env_is_run_as_a_vector_env_of_one() -> None:
    # Tianshou's Collector takes a single env; so does ours (wrapped by the dummy backend)
    env = CountEnv(3)
    buf = ReplayBuffer(20)
    collector = Collector(ConstPolicy(), env, buf, seed=0)
    assert collector.num_envs == 1
    stats = collector.collect(n_episode=2)
    assert stats.n_episode == 2 and len(buf) == 6
    assert buf.obs[:6, 0].tolist() == [0, 1, 2, 0, 1, 2]
    assert buf.terminated[:6].tolist() == [False, False, True] * 2


def test_a_gymnasium_vector_env_or_copies_of_one_instance_are_refused_by_name() -> None:
    import rlblocks
    from rlblocks.contracts import ConfigError

    sync = gym.vector.SyncVectorEnv([lambda: CountEnv(3)])
    with pytest.raises(ConfigError, match=r"gymnasium vector env .*SyncVectorEnv.*env id, an env "):
        Collector(ConstPolicy(), sync, ReplayBuffer(10))
    with pytest.raises(ConfigError, match="one env instance cannot make num_envs=2"):
        rlblocks.make_vector_env("dummy", CountEnv(3), num_envs=2)
    sync.close()


class InfoEnv(CountEnv):
    """CountEnv whose step info reports the step (``t``), a flag and, unless ``sparse``, a
    vector; with ``sparse`` the ``vec`` key is left out at step 2."""

    def __init__(self, length: int, sparse: bool = False) -> None:
        super().__init__(length)
        self.sparse = sparse

    def step(self, action):
        obs, rew, term, trunc, _ = super().step(action)
        info = {"t": self.t, "even": self.t % 2 == 0, "vec": np.full(2, self.t, np.float32)}
        if self.sparse and self.t == 2:
            del info["vec"]
        return obs, rew, term, trunc, info


def test_named_info_keys_are_stored_with_their_step() -> None:
    envs = DummyVectorEnv([lambda: InfoEnv(3), lambda: InfoEnv(4)])
    buf = ReplayBuffer(50, num_envs=2)
    Collector(ConstPolicy(), envs, buf, seed=0, info_keys=["t", "vec"]).collect(n_step=10)
    rows = buf[buf.sample_index(0)]
    # the info of a row is the one that came with its obs_next, as in Tianshou's buffer
    assert np.array_equal(rows.info.t, rows.obs_next[:, 0])
    assert rows.info.vec.shape == (10, 2) and rows.info.vec.dtype == np.float32
    assert np.array_equal(rows.info.vec[:, 1], rows.obs_next[:, 0])
    assert "even" not in rows.info  # only the keys asked for
    batch, _ = buf.sample(4)
    assert np.array_equal(batch.info.t, batch.obs_next[:, 0])


def test_an_info_key_a_step_does_not_report_is_named_with_its_env() -> None:
    envs = DummyVectorEnv([lambda: InfoEnv(5), lambda: InfoEnv(5, sparse=True)])
    collector = Collector(ConstPolicy(), envs, ReplayBuffer(50, num_envs=2), info_keys=["vec"])
    with pytest.raises(ConfigError, match=r"info key 'vec' is missing from the step info of env "
                                          r"1 .*\['even', 't'\]"):
        collector.collect(n_step=10)
    with pytest.raises(ConfigError, match="info_keys must be a list"):
        Collector(ConstPolicy(), envs, None, info_keys="vec")


def test_views_of_info_columns_store_their_keys_and_read_them_back() -> None:
    from rlblocks.contracts import ViewRequirement, training_views

    policy = ConstPolicy()
    policy.view_requirements = {
        "prev_t": ViewRequirement("info.t", shift=-1, used_for_acting=False),
    }
    envs = DummyVectorEnv([lambda: InfoEnv(3)])
    buf = ReplayBuffer(20)
    collector = Collector(policy, envs, buf, seed=0)
    assert collector.info_keys == ("t",)
    collector.collect(n_step=5)
    idx = buf.sample_index(0)
    views = training_views(buf, idx, policy.view_requirements)
    assert views["prev_t"].tolist() == [0, 1, 2, 0, 1]  # zeros at each episode's start


def test_collect_stats_read_by_key_with_tianshou_names() -> None:
    from rlblocks.collect import TIANSHOU_KEYS, CollectStats

    collector, _, _ = make([2, 4])
    stats = collector.collect(n_episode=3)  # returns are the lengths: 2, 2 and 4 in some order
    assert not isinstance(stats, dict) and stats.n_episode == 3  # attributes still work
    assert stats["n_episode"] == stats["n/ep"] == 3
    assert stats["n_step"] == stats["n/st"] == 8
    assert stats["rew"] == stats["mean_return"] == pytest.approx(8 / 3)
    assert stats["rew_std"] == pytest.approx(np.std([2.0, 2.0, 4.0]))
    assert stats["rews"] is stats.returns and stats["lens"] is stats.lengths
    assert stats["len"] == pytest.approx(8 / 3)
    assert stats["len_std"] == pytest.approx(np.std([2, 2, 4]))
    assert stats["v/st"] == stats.steps_per_s > 0
    assert stats["v/ep"] == pytest.approx(3 / stats.seconds)
    assert "rew" in stats and "idxs" not in stats
    assert set(TIANSHOU_KEYS) <= set(stats.keys())
    as_dict = dict(stats)
    assert as_dict["n/ep"] == 3 and set(as_dict) == set(stats.keys())
    with pytest.raises(KeyError, match=r"no key 'idxs'.*n_episode.*n/ep"):
        stats["idxs"]
    # no finished episode: the means are nan, as the attributes say
    empty = CollectStats(n_step=5, seconds=0.0)
    assert np.isnan(empty["rew"]) and np.isnan(empty["len"]) and empty["v/st"] == 0.0
