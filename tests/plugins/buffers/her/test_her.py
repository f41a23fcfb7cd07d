"""HER relabeller: future goals from the same episode, recomputed rewards, n-step targets through
the relabelled view, conformance, hdf5 files, selection by name (as a part of a composed buffer),
and DQN + HER solving bit-flipping where plain replay does not."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlblocks
from rlblocks.algo import nstep_return
from rlblocks.collect import Collector
from rlblocks.contracts import Batch, ConfigError
from rlblocks.plugins import hookimpl
from rlblocks.replay import EnvAttachedPart, Relabeller, ReplayBuffer, SharedRing
from rlblocks.run import seed_everything
from rlblocks.testing.buffer_checks import History, check_buffer
from rlblocks_buffer_her import HERReplayBuffer, HERVectorReplayBuffer, HindsightRelabeller
from rlblocks_buffer_her.buffer import RelabelledView
from rlblocks_buffer_vector import PerEnvLayout

BUFFERS = [HERReplayBuffer, HERVectorReplayBuffer]


# --- a bit-flipping goal env (Andrychowicz et al., 2017, section 3.1) -------------------------


def goal_reward(achieved_goal, desired_goal, info) -> np.ndarray:
    """0 where the goal is reached, -1 elsewhere (vectorised over a leading axis)."""
    return -(np.asarray(achieved_goal) != np.asarray(desired_goal)).any(-1).astype(np.float32)


def goal_reached(achieved_goal, desired_goal, info) -> np.ndarray:
    return (np.asarray(achieved_goal) == np.asarray(desired_goal)).all(-1)


class BitFlipEnv(gym.Env):
    """``n`` bits; action ``i`` flips bit ``i``; reward -1 until the state equals the goal, then
    0 and the episode terminates; truncated after ``n`` steps (enough to solve any instance)."""

    def __init__(self, n: int = 8) -> None:
        self.n = n
        bits = gym.spaces.Box(0.0, 1.0, (n,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(n)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self.state.copy(), "achieved_goal": self.state.copy(),
                "desired_goal": self.goal.copy()}

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.integers(0, 2, self.n).astype(np.float32)
        self.goal = self.state
        while np.array_equal(self.goal, self.state):
            self.goal = self.np_random.integers(0, 2, self.n).astype(np.float32)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.state[int(action)] = 1.0 - self.state[int(action)]
        self.t += 1
        success = bool(np.array_equal(self.state, self.goal))
        truncated = not success and self.t >= self.n
        return self._obs(), 0.0 if success else -1.0, success, truncated, {}

    def compute_reward(self, achieved_goal, desired_goal, info):
        return goal_reward(achieved_goal, desired_goal, info)

    def compute_terminated(self, achieved_goal, desired_goal, info):
        return goal_reached(achieved_goal, desired_goal, info)


# --- scripted goal data ---------------------------------------------------------------------


def goal_step(uid: np.ndarray, episode: np.ndarray) -> dict:
    """Rows whose goals identify the step: ``obs_next.achieved_goal = uid + 0.5``; the desired
    goal is the episode's own (``-1 - episode``), which no step achieves."""
    uid = np.asarray(uid, dtype=np.float32)[:, None]
    own = (-1.0 - np.asarray(episode, dtype=np.float32))[:, None]
    obs = {"observation": uid, "achieved_goal": uid, "desired_goal": own}
    obs_next = {"observation": uid + 0.5, "achieved_goal": uid + 0.5, "desired_goal": own}
    n = len(uid)
    return {"obs": obs, "act": np.zeros(n, np.int64), "rew": -np.ones(n), "obs_next": obs_next}


class GoalScript:
    """Adds random interleaved steps of ``num_envs`` envs and remembers each step's episode."""

    def __init__(self, buf, seed: int = 0) -> None:
        self.buf, self.rng = buf, np.random.default_rng(seed)
        self.history = History(buf.num_envs)
        self.episode_of: list[int] = []  # per uid
        self.open = np.arange(buf.num_envs)  # running episode id per env
        self.episodes = buf.num_envs

    def add(self, steps: int) -> None:
        for _ in range(steps):
            k = int(self.rng.integers(1, self.buf.num_envs + 1))
            envs = np.sort(self.rng.choice(self.buf.num_envs, size=k, replace=False))
            uid = np.arange(len(self.episode_of), len(self.episode_of) + k)
            done = self.rng.random(k) < 0.2
            data = goal_step(uid, self.open[envs])
            data["terminated"] = done & (uid % 2 == 0)
            data["truncated"] = done & (uid % 2 == 1)
            slots = self.buf.add(data, env_ids=envs)[0]
            self.history.record(envs, done, data["rew"], slots)
            self.episode_of.extend(self.open[envs].tolist())
            for e in envs[done]:
                self.open[e] = self.episodes
                self.episodes += 1

    def stored_future(self, uid: int) -> list[int]:
        """Steps of ``uid``'s episode from ``uid`` on that are still stored."""
        stored = set(np.asarray(self.buf.get(self.buf.sample_index(0), "obs")["observation"])
                     [:, 0].astype(int).tolist())
        env = self.history.env[uid]
        ep = self.episode_of[uid]
        return [u for u in self.history.by_env[env]
                if u >= uid and self.episode_of[u] == ep and u in stored]


# --- conformance and construction ------------------------------------------------------------


@pytest.mark.parametrize("cls", BUFFERS)
def test_her_buffers_pass_the_buffer_conformance_checks(cls) -> None:
    # k=0: the scripted obs carry no goals, and sample() must equal buf[indices]
    check_buffer(lambda size, num_envs: cls(size, num_envs=num_envs, k=0))


def test_the_relabeller_is_a_relabeller_part_that_needs_the_env() -> None:
    her = HindsightRelabeller(k=2)
    assert isinstance(her, Relabeller) and isinstance(her, EnvAttachedPart)
    assert her.name == "her"


def test_options_keep_import_paths_and_drop_callables() -> None:
    path = "operator:eq"  # any importable callable will do
    her = HindsightRelabeller(k=2, compute_reward=path, terminate_on_success=True,
                              compute_terminated=goal_reached)
    assert her.options() == {"k": 2, "strategy": "future", "compute_reward": path,
                             "terminate_on_success": True, "compute_terminated": None}
    buf = ReplayBuffer(10, relabel=her)
    assert buf.parts()["relabel"] == ("her", her.options())
    assert her.buffer is buf


def test_make_buffer_selects_her_by_name_with_its_options() -> None:
    buf = rlblocks.make_buffer("her", size=100, num_envs=4, k=1, terminate_on_success=True)
    assert type(buf) is ReplayBuffer
    assert isinstance(buf.relabeller, HindsightRelabeller)
    assert isinstance(buf.layout, PerEnvLayout)  # her goes on the per-env layout by default
    her = buf.relabeller
    assert her.future_p == pytest.approx(0.5) and her.terminate_on_success
    assert buf.layout.sub_size == 25
    # on another layout, and with a buffer-level option beside the relabeller's
    ring = rlblocks.make_buffer("replay", size=100, num_envs=4, relabel="her", k=2,
                                ignore_obs_next=True)
    assert isinstance(ring.layout, SharedRing) and isinstance(ring.relabeller, HindsightRelabeller)
    assert ring.relabeller.k == 2 and ring.ignore_obs_next
    with pytest.raises(ConfigError, match="strategy"):
        rlblocks.make_buffer("her", size=100, strategy="episode")
    with pytest.raises(ConfigError, match="kk"):
        rlblocks.make_buffer("her", size=100, kk=2)


def test_stacked_frames_and_unknown_strategies_are_refused_with_a_hint() -> None:
    with pytest.raises(ValueError, match="stack_num"):
        ReplayBuffer(10, stack_num=4, relabel=HindsightRelabeller())
    with pytest.raises(ConfigError, match="stack_num"):
        rlblocks.make_buffer("her", size=10, stack_num=4)
    with pytest.raises(ConfigError, match="future"):
        HERReplayBuffer(10, strategy="final")
    with pytest.raises(ConfigError, match=r"package\.module:function"):
        HERReplayBuffer(10, compute_reward="no_such_module_xyz:reward")


def test_sampling_without_a_reward_function_says_how_to_give_one() -> None:
    buf = HERReplayBuffer(10, num_envs=2)
    buf.add({**goal_step(np.arange(2), np.zeros(2)), "terminated": np.zeros(2, bool),
             "truncated": np.zeros(2, bool)})
    with pytest.raises(ConfigError, match="attach_env"):
        buf.sample(4)


def test_array_observations_are_refused_with_a_hint() -> None:
    buf = HERReplayBuffer(10, num_envs=2, compute_reward=goal_reward)
    buf.add({"obs": np.zeros(2), "act": np.zeros(2), "rew": np.zeros(2),
             "terminated": np.zeros(2, bool), "truncated": np.zeros(2, bool),
             "obs_next": np.zeros(2)})
    with pytest.raises(ConfigError, match="achieved_goal"):
        buf.sample(4)


def test_window_samplers_are_refused_with_a_hint_when_the_buffer_is_built() -> None:
    with pytest.raises(ConfigError, match=r"single transitions.*'sequence' draws windows"):
        rlblocks.make_buffer("her", size=10, sampler="sequence", length=3)


def test_attach_env_takes_the_goal_functions_of_the_unwrapped_env() -> None:
    gym.register("rlblocks-test/BitFlip-v0", entry_point=BitFlipEnv, max_episode_steps=8)
    try:
        env = gym.make("rlblocks-test/BitFlip-v0", n=4)
        buf = HERVectorReplayBuffer(10, terminate_on_success=True).attach_env(env)
        assert buf.relabeller.compute_reward.__func__ is BitFlipEnv.compute_reward
        assert buf.relabeller.compute_terminated.__func__ is BitFlipEnv.compute_terminated
        # functions given to the relabeller win over the env's
        own = HERReplayBuffer(10, compute_reward=goal_reward).attach_env(env)
        assert own.relabeller.compute_reward is goal_reward
    finally:
        gym.registry.pop("rlblocks-test/BitFlip-v0", None)
    with pytest.raises(ConfigError, match="compute_reward"):
        HERReplayBuffer(10).attach_env(gym.make("CartPole-v1"))


def test_goal_function_mistakes_are_named_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="k must be >= 0"):
        HindsightRelabeller(k=-1)
    with pytest.raises(ConfigError, match="a callable or an import path"):
        HindsightRelabeller(compute_reward=3)
    with pytest.raises(ConfigError, match="'os:sep' names a str, not a function"):
        HindsightRelabeller(compute_reward="os:sep")

    class RewardOnly:
        compute_reward = staticmethod(goal_reward)

    with pytest.raises(ConfigError, match=r"compute_terminated.*terminate_on_success=False"):
        HERReplayBuffer(10, terminate_on_success=True).attach_env(RewardOnly())
    with pytest.raises(RuntimeError, match="bind it first"):
        HindsightRelabeller(k=1).view(Batch(), np.zeros(0, np.int64))

    def filled(**kwargs):
        buf = HERReplayBuffer(10, num_envs=2, k=1000, seed=0, **kwargs)
        buf.add({**goal_step(np.arange(2), np.zeros(2)), "terminated": np.zeros(2, bool),
                 "truncated": np.zeros(2, bool)})
        return buf

    # reward functions that are not vectorised over transitions
    with pytest.raises(ConfigError, match=r"compute_reward returned shape .*vectorised"):
        filled(compute_reward=lambda a, d, info: -1.0).sample(4)
    scalar_flags = lambda a, d, info: True  # noqa: E731
    with pytest.raises(ConfigError, match=r"compute_terminated returned shape .*vectorised"):
        filled(compute_reward=goal_reward, terminate_on_success=True,
               compute_terminated=scalar_flags).sample(4)
    with pytest.raises(ConfigError, match=r"terminate_on_success is set .*compute_terminated"):
        filled(compute_reward=goal_reward, terminate_on_success=True).sample(4)


def test_the_relabelled_view_reads_through_and_refuses_misaligned_reads() -> None:
    buf = HERReplayBuffer(20, num_envs=2, k=4, compute_reward=goal_reward, seed=1,
                          compute_terminated=goal_reached, terminate_on_success=True)
    GoalScript(buf, seed=3).add(8)
    batch, idx = buf.sample(6)
    with pytest.raises(ValueError, match="pass the batch and the indices"):
        buf.batch_view(batch, idx[:3])
    view = buf.batch_view(batch, idx)
    assert isinstance(view, RelabelledView)
    assert len(view) == len(buf)
    np.testing.assert_array_equal(view.env_id, buf.env_id)
    np.testing.assert_array_equal(view.prev(idx), buf.prev(idx))
    with pytest.raises(ValueError, match="one slot per sampled row"):
        view.get(idx[:2], "rew")
    rows = view[idx]  # the sampled rows as the batch saw them: its goals, rewards and flags
    np.testing.assert_array_equal(rows.obs.desired_goal, batch.obs.desired_goal)
    np.testing.assert_array_equal(rows.obs_next.desired_goal, batch.obs.desired_goal)
    np.testing.assert_array_equal(rows.rew, batch.rew)
    np.testing.assert_array_equal(rows.terminated, batch.terminated)
    np.testing.assert_array_equal(view.get(idx, "done"), batch.done)
    np.testing.assert_array_equal(view.get(idx, "act"), buf.get(idx, "act"))


# --- relabelling ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", BUFFERS)
def test_relabelled_goals_always_come_from_the_same_episodes_future(cls) -> None:
    buf = cls(30, num_envs=3, k=4, compute_reward=goal_reward, seed=0)
    script = GoalScript(buf, seed=1)
    script.add(40)  # overwrites the oldest steps; some episodes are still running
    assert len(buf.unfinished_index()) > 0
    batch, idx = buf.sample(4000)
    uid = batch.obs.observation[:, 0].astype(int)
    goal = batch.obs.desired_goal[:, 0]
    relabelled = goal >= 0
    assert 0.76 < relabelled.mean() < 0.84  # k=4: 80%
    reached = {u: set() for u in uid[relabelled].tolist()}
    for u, g in zip(uid[relabelled].tolist(), goal[relabelled].tolist()):
        step = int(g - 0.5)
        assert step in script.stored_future(u), (
            f"step {u} got the goal of step {step}, not one of its episode's stored future "
            f"{script.stored_future(u)}"
        )
        reached[u].add(step)
    # every stored future step is drawn, up to the newest step of unfinished episodes
    often = [u for u in reached if np.count_nonzero(uid[relabelled] == u) >= 60]
    assert often and all(reached[u] == set(script.stored_future(u)) for u in often)
    unfinished = set(buf.get(buf.unfinished_index(), "obs")["observation"][:, 0].astype(int))
    assert unfinished & set().union(*reached.values())
    # the originals are untouched: obs and obs_next keep the episode's own goal
    np.testing.assert_array_equal(batch.obs_next.desired_goal, batch.obs.desired_goal)
    stored = buf.get(idx, "obs")["desired_goal"][:, 0]
    np.testing.assert_array_equal(goal[~relabelled], stored[~relabelled])


@pytest.mark.parametrize("ignore_obs_next", [False, True])
@pytest.mark.parametrize("terminate_on_success", [False, True])
def test_rewards_and_terminations_are_recomputed_for_relabelled_goals(
    terminate_on_success: bool, ignore_obs_next: bool
) -> None:
    # without stored obs_next, achieved goals come from the next step's obs
    buf = HERVectorReplayBuffer(
        60, num_envs=2, k=1, compute_reward=goal_reward, compute_terminated=goal_reached,
        terminate_on_success=terminate_on_success, ignore_obs_next=ignore_obs_next, seed=3,
    )
    GoalScript(buf, seed=2).add(30)
    batch, idx = buf.sample(2000)
    relabelled = batch.obs.desired_goal[:, 0] >= 0
    assert 0.45 < relabelled.mean() < 0.55  # k=1: half
    want = goal_reward(batch.obs_next.achieved_goal, batch.obs.desired_goal, {})
    np.testing.assert_array_equal(batch.rew, want)
    own = relabelled & (want == 0)  # the goal is the transition's own achieved goal
    assert own.any() and (want[relabelled & ~own] == -1).any()
    stored_term = buf.get(idx, "terminated")
    if terminate_on_success:
        np.testing.assert_array_equal(batch.terminated[relabelled], own[relabelled])
    else:
        np.testing.assert_array_equal(batch.terminated, stored_term)
    np.testing.assert_array_equal(batch.done, batch.terminated | batch.truncated)
    # reading the buffer directly still gives what was stored
    np.testing.assert_array_equal(buf[idx].rew, -np.ones(len(idx)))


def test_nstep_returns_use_relabelled_rewards_along_the_whole_path() -> None:
    gamma, n_step = 0.5, 3
    buf = HERReplayBuffer(50, num_envs=2, k=4, compute_reward=goal_reward,
                          compute_terminated=goal_reached, terminate_on_success=True, seed=4)
    GoalScript(buf, seed=5).add(25)
    batch, idx = buf.sample(300)
    partial, boot, discount = nstep_return(buf.batch_view(batch, idx), idx, gamma, n_step)
    goals = batch.obs.desired_goal
    for j in range(len(idx)):
        cur, ret, k, ended = int(idx[j]), 0.0, 0, False
        while True:
            ag = buf.get(np.array([cur]), "obs_next")["achieved_goal"]
            reached = bool(goal_reached(ag, goals[j : j + 1], {})[0])
            ret += gamma**k * float(goal_reward(ag, goals[j : j + 1], {})[0])
            k += 1
            nxt = int(buf.next(cur))
            if reached or nxt == cur or k == n_step:
                ended = reached
                break
            cur = nxt
        assert partial[j] == pytest.approx(ret), f"row {j}"
        assert boot[j] == cur
        assert discount[j] == pytest.approx(0.0 if ended else gamma**k)
    # the view gives bootstrap observations the row's goal
    np.testing.assert_array_equal(
        buf.batch_view(batch, idx).get(boot, "obs_next")["desired_goal"], goals
    )


def test_dqn_targets_on_a_her_buffer_read_the_relabelled_view() -> None:
    env = BitFlipEnv(3)
    # hard target updates far apart: the target network is the same before and after learning
    policy = rlblocks.make_policy("dqn", env.observation_space, env.action_space, n_step=2,
                                  gamma=0.5, hidden_sizes=[8], tau=None,
                                  target_update_interval=1000)
    buf = HERReplayBuffer(40, k=4, compute_reward=goal_reward, seed=0)
    envs = rlblocks.make_vector_env("dummy", [lambda: BitFlipEnv(3)], seed=0)
    Collector(policy, envs, buf, seed=0).collect(n_step=30, random=True)
    seen: dict = {}
    process_fn = policy.process_fn

    def spy(batch, buffer, indices):
        # the expected targets, computed from the view before learning moves the online net
        # (Double DQN picks the bootstrap action with it)
        partial, boot, discount = nstep_return(buffer, indices, 0.5, 2)
        with torch.no_grad():
            q_next = policy.target_value(policy.obs_tensor(buffer.get(boot, "obs_next")))
        q_next = q_next.numpy()
        seen.update(buffer=buffer, indices=indices, partial=partial,
                    expected=partial + discount * q_next)
        out = process_fn(batch, buffer, indices)
        seen["returns"] = out.returns.numpy()
        return out

    policy.process_fn = spy
    policy.update(64, buf)
    view, idx, partial = seen["buffer"], seen["indices"], seen["partial"]
    assert isinstance(view, RelabelledView), "update must hand process_fn the relabelled view"
    np.testing.assert_allclose(seen["returns"], seen["expected"], rtol=1e-5)
    plain, _, _ = nstep_return(buf, idx, 0.5, 2)
    assert not np.allclose(partial, plain)  # relabelled rows earn rewards the stored ones lack


# --- files ------------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.sets(st.integers(0, 2), min_size=1), st.floats(0, 1)),
                min_size=1, max_size=30), st.sampled_from(BUFFERS), st.booleans())
def test_random_add_sequences_survive_hdf5_with_goal_observations(
    tmp_path_factory, steps, cls, ignore_obs_next
) -> None:
    buf = cls(9, num_envs=3, k=3, compute_reward=goal_reward, compute_terminated=goal_reached,
              terminate_on_success=True, ignore_obs_next=ignore_obs_next, seed=7)
    history = History(3)
    uid = 0
    for envs, p_done in steps:
        envs = np.array(sorted(envs))
        ids = np.arange(uid, uid + len(envs))
        uid += len(envs)
        done = (ids * 7919 % 100) / 100 < p_done
        data = {**goal_step(ids, np.zeros(len(ids))), "terminated": done,
                "truncated": np.zeros(len(ids), bool)}
        out = buf.add(data, env_ids=envs)
        history.record(envs, done, data["rew"], out[0])

    def uid_of(b):
        return lambda slots: b.get(slots, "obs")["observation"][:, 0]

    history.verify(buf, uid_of(buf))
    path = tmp_path_factory.mktemp("h5") / "her.h5"
    buf.save_hdf5(path)
    loaded = cls.load_hdf5(path)
    history.verify(loaded, uid_of(loaded), "after hdf5 load")
    assert isinstance(loaded, cls) and isinstance(loaded.relabeller, HindsightRelabeller)
    assert type(loaded.layout) is type(buf.layout)
    her = loaded.relabeller
    assert (her.k, her.terminate_on_success, loaded.ignore_obs_next) == (
        3, True, ignore_obs_next
    )
    loaded.attach_env(BitFlipEnv(1))  # callables are not saved: attach them again
    a, ia = buf.sample(16)
    b, ib = loaded.sample(16)  # same generator state: the same draws and goals
    np.testing.assert_array_equal(ia, ib)
    for key in ("rew", "terminated", "done"):
        np.testing.assert_array_equal(a[key], b[key])
    np.testing.assert_array_equal(a.obs.desired_goal, b.obs.desired_goal)


# --- learning ---------------------------------------------------------------------------------


def train_bitflip(
    buffer: str, n: int, episodes: int, seed: int = 0, n_step: int = 1, **options
) -> float:
    """DQN on ``n``-bit flipping for ``episodes * n`` env steps; greedy success rate over 100
    test episodes."""
    seed_everything(seed)
    env = BitFlipEnv(n)
    envs = rlblocks.make_vector_env("dummy", [lambda: BitFlipEnv(n)] * 4, seed=seed)
    test_envs = rlblocks.make_vector_env("dummy", [lambda: BitFlipEnv(n)] * 10, seed=seed + 1)
    policy = rlblocks.make_policy(
        "dqn", env.observation_space, env.action_space, hidden_sizes=[128], lr=1e-3, gamma=0.9,
        n_step=n_step, tau=0.05, eps_start=0.5, eps_end=0.1, eps_decay_steps=episodes * n // 2,
    )
    policy.seed(seed)
    budget = episodes * n
    buf = rlblocks.make_buffer(buffer, size=budget, num_envs=4, **options)
    buf.attach_env(env)
    buf.seed(seed)
    collector = Collector(policy, envs, buf, seed=seed)
    steps = 0
    while steps < budget:
        policy.train()
        steps += collector.collect(n_step=16).n_step
        policy.set_env_step(steps)
        for _ in range(8):  # one gradient step per two env steps
            policy.update(128, buf)
    policy.eval()
    result = Collector(policy, test_envs, None, exploration=False, seed=seed + 2).collect(
        n_episode=100
    )
    return float(np.mean(result.returns > -n))  # -n: every step failed


@pytest.mark.slow
def test_dqn_with_her_solves_bit_flipping_where_plain_replay_does_not() -> None:
    n, episodes = 10, 500
    her = train_bitflip("her", n, episodes, terminate_on_success=True)
    plain = train_bitflip("vector", n, episodes)
    assert her >= 0.9, f"DQN + HER solved {her:.0%} of {n}-bit test episodes"
    assert plain < 0.2, f"plain replay solved {plain:.0%}: the task is too easy to show HER"


@pytest.mark.slow
def test_dqn_prioritized_her_nstep_on_memmap_solves_bit_flipping(tmp_path) -> None:
    """Every part at once: the per-env layout, prioritized sampling, hindsight relabelling with
    3-step targets over the relabelled view, memory-mapped storage."""
    n, episodes = 10, 500
    solved = train_bitflip(
        "vector", n, episodes, n_step=3, sampler="prioritized", relabel="her", alpha=0.6,
        beta=0.4, beta_anneal_steps=n * episodes, terminate_on_success=True, storage="memmap",
        path=str(tmp_path / "buffer"),
    )
    assert solved >= 0.9, f"DQN + PER + HER + 3-step on memmap solved {solved:.0%}"
    assert any(p.name.startswith("data.") for p in (tmp_path / "buffer").iterdir())


def test_train_by_names_takes_compute_reward_from_the_goal_env(tmp_path) -> None:
    """``rlblocks.train(..., buffer="her")`` with no reward function: the run attaches the env's
    own compute_reward; an env without one is refused with the fix."""
    gym.register("rlblocks-test/BitFlipTrain-v0", entry_point=BitFlipEnv, max_episode_steps=4,
                 kwargs={"n": 3})
    seen: dict = {}

    class Spy:
        @hookimpl
        def rlblocks_update_end(self, stats, env_step, gradient_step) -> None:
            seen["updates"] = seen.get("updates", 0) + 1

    try:
        result = rlblocks.train(
            "dqn", env="rlblocks-test/BitFlipTrain-v0", buffer="her", seed=0, loggers=[],
            progress=False, max_env_steps=300, num_envs=1, hooks=[Spy()], run_dir=tmp_path / "r",
            overrides=["buffer.size=500", "trainer.test_interval=300", "trainer.test_episodes=2",
                       "env.num_test_envs=1", "trainer.warmup_steps=50"],
        )
        assert result.env_steps >= 300 and result.gradient_steps > 0 and seen.get("updates")
        with pytest.raises(ConfigError, match="compute_reward"):
            rlblocks.train("dqn", env="CartPole-v1", buffer="her", seed=0, loggers=[],
                           progress=False, max_env_steps=100, run_dir=tmp_path / "c",
                           overrides=["trainer.warmup_steps=50"])
    finally:
        gym.registry.pop("rlblocks-test/BitFlipTrain-v0", None)
