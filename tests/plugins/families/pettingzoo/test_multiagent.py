"""Multi-agent envs as agent slots and the multi-agent collector (rlblocks-family-pettingzoo)."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo import AECEnv, ParallelEnv  # noqa: E402
from pettingzoo.utils import AgentSelector  # noqa: E402

from rlblocks.contracts import Batch, ConfigError  # noqa: E402
from rlblocks.run import make_buffer  # noqa: E402
from rlblocks_family_pettingzoo import (  # noqa: E402
    MultiAgentCollector,
    MultiAgentVectorEnv,
    is_multiagent_id,
    multiagent_factory,
)


class Relay(ParallelEnv):
    """Agents that appear and leave: agent ``i`` enters at step ``enter[i]`` and stays for
    ``stay[i]`` steps (then terminates), or until ``horizon`` (then truncates). Observation
    ``[episode, t, agent, birth]``; reward ``1000 * agent + 10 * t + action`` - so every stored
    transition can be checked."""

    metadata: ClassVar[dict[str, Any]] = {"name": "relay_v0", "render_modes": []}
    render_mode = None

    def __init__(self, k: int = 3, horizon: int = 6, spread: int = 3) -> None:
        self.possible_agents = [f"a{i}" for i in range(k)]
        self.horizon, self.spread = horizon, spread
        self._space = gym.spaces.Box(-1e6, 1e6, (4,), np.float32)
        self._act = gym.spaces.Discrete(3)
        self.episode = -1
        self.env_steps = 0
        self.rng = np.random.default_rng(0)

    def observation_space(self, agent: str) -> gym.Space:
        return self._space

    def action_space(self, agent: str) -> gym.Space:
        return self._act

    def _obs(self, agent: str) -> np.ndarray:
        i = self.possible_agents.index(agent)
        return np.array([self.episode, self.t, i, self.enter[i]], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        k = len(self.possible_agents)
        self.episode += 1
        self.t = 0
        self.enter = self.rng.integers(0, self.spread, size=k)
        self.enter[self.rng.integers(k)] = 0  # someone is there at the start
        self.stay = self.rng.integers(1, self.horizon + 1, size=k)
        self.agents = [a for i, a in enumerate(self.possible_agents) if self.enter[i] == 0]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.env_steps += 1
        t0 = self.t
        self.t += 1
        rew, term, trunc, obs = {}, {}, {}, {}
        for a in self.agents:
            i = self.possible_agents.index(a)
            rew[a] = 1000.0 * i + 10.0 * t0 + float(actions[a])
            term[a] = bool(self.t - self.enter[i] >= self.stay[i])
            trunc[a] = bool(self.t >= self.horizon and not term[a])
            obs[a] = self._obs(a)
        left = [a for a in self.agents if not (term[a] or trunc[a])]
        entering = [
            a
            for i, a in enumerate(self.possible_agents)
            if self.enter[i] == self.t and self.t < self.horizon and a not in self.agents
        ]
        self.agents = left + entering
        for a in entering:
            obs[a] = self._obs(a)
        return obs, rew, term, trunc, {a: {} for a in obs}


class ObsPolicy:
    """Acts ``t % 3`` from the observation; records the agent column it was given."""

    training = True
    view_requirements: ClassVar[dict[str, Any]] = {}

    def __init__(self) -> None:
        self.agents_seen: list[np.ndarray] = []

    def __call__(self, batch: Batch, state: Any = None) -> Batch:
        self.agents_seen.append(np.asarray(batch.agent))
        return Batch(act=(np.asarray(batch.obs)[:, 1] % 3).astype(np.int64))

    def exploration_noise(self, act: np.ndarray, _result: Any) -> np.ndarray:
        return act

    def map_action(self, act: np.ndarray) -> np.ndarray:
        return act

    def map_action_inverse(self, act: np.ndarray) -> np.ndarray:
        return act


def _rows(buffer: Any) -> Batch:
    idx = buffer.sample_indices(0)
    return buffer[idx], idx


def _check_transitions(buffer: Any, envs: MultiAgentVectorEnv) -> int:
    """Every stored row is a true transition of its slot's agent: reward from the env's rule,
    obs_next one tick after obs in the same episode, the agent column right."""
    batch, _ = _rows(buffer)
    obs, nxt = np.asarray(batch.obs), np.asarray(batch.obs_next)
    rew, agent = np.asarray(batch.rew), np.asarray(batch.agent)
    act = np.asarray(batch.act)
    np.testing.assert_array_equal(agent, obs[:, 2])
    np.testing.assert_allclose(rew, 1000 * obs[:, 2] + 10 * obs[:, 1] + act)
    np.testing.assert_array_equal(nxt[:, 0], obs[:, 0])  # same episode
    np.testing.assert_array_equal(nxt[:, 1], obs[:, 1] + 1)
    np.testing.assert_array_equal(nxt[:, 2], obs[:, 2])
    return len(rew)


@settings(max_examples=25, deadline=None)
@given(
    num_envs=st.integers(1, 3),
    k=st.integers(1, 4),
    horizon=st.integers(1, 6),
    n_step=st.integers(1, 40),
    by_agent=st.booleans(),
)
def test_parallel_slots_store_true_transitions_and_count(
    num_envs: int, k: int, horizon: int, n_step: int, by_agent: bool
) -> None:
    envs = MultiAgentVectorEnv([lambda: Relay(k, horizon)] * num_envs)
    buffer = make_buffer("replay", 10_000, envs.num_slots)
    policy = ObsPolicy()
    col = MultiAgentCollector(
        policy, envs, buffer, seed=1, count_steps_by="agent_steps" if by_agent else "env_steps"
    )
    stats = col.collect(n_step=n_step)
    stats2 = col.collect(n_step=n_step)
    stored = _check_transitions(buffer, envs)
    env_steps = sum(e.env_steps for e in envs.envs)
    assert col.total_agent_steps == stored
    assert col.total_env_steps == env_steps
    counted = stored if by_agent else env_steps
    assert stats.n_step + stats2.n_step == counted
    # both counts come with every collect, whichever one n_step counts
    assert stats.env_steps + stats2.env_steps == env_steps
    assert stats.agent_steps + stats2.agent_steps == stored
    assert stats.n_step >= n_step and stats2.n_step >= n_step
    # at least: one more round of every env could have been one too many, no more
    per_round = num_envs * (k if by_agent else 1)
    assert stats.n_step < n_step + per_round
    for seen in policy.agents_seen:
        assert seen.dtype.kind == "i"


@settings(max_examples=20, deadline=None)
@given(num_envs=st.integers(1, 3), k=st.integers(1, 3), n_episode=st.integers(1, 7))
def test_n_episode_counts_whole_env_episodes(num_envs: int, k: int, n_episode: int) -> None:
    envs = MultiAgentVectorEnv([lambda: Relay(k, 5)] * num_envs)
    buffer = make_buffer("replay", 10_000, envs.num_slots)
    col = MultiAgentCollector(ObsPolicy(), envs, buffer, seed=3, episode_return="sum")
    stats = col.collect(n_episode=n_episode)
    assert stats.n_episode == n_episode == len(stats.returns)
    batch, _ = _rows(buffer)
    ends = np.asarray(batch.terminated) | np.asarray(batch.truncated)
    # every agent episode that started was played to its end
    assert ends.sum() == len(
        {(o[0], o[2], s) for o, s in zip(np.asarray(batch.obs), _lanes(buffer))}
    )
    # the team returns are the rewards summed over all stored steps
    np.testing.assert_allclose(stats.returns.sum(), np.asarray(batch.rew).sum())


def _lanes(buffer: Any) -> np.ndarray:
    _, idx = _rows(buffer)
    return np.asarray(buffer.env_id)[idx]


class Turns(AECEnv):
    """Agents act in turn; every turn pays each agent 1, plus the acting agent's action. A
    lap of ``k`` turns later the agent acts again; after ``horizon`` turns all truncate."""

    metadata: ClassVar[dict[str, Any]] = {"name": "turns_v0", "render_modes": []}
    render_mode = None

    def __init__(self, k: int = 3, horizon: int = 8) -> None:
        super().__init__()
        self.possible_agents = [f"p{i}" for i in range(k)]
        self.horizon = horizon
        self.episode = -1

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-1e6, 1e6, (4,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(3)

    def observe(self, agent: str) -> np.ndarray:
        i = self.possible_agents.index(agent)
        return np.array([self.episode, self.turn, i, 0], np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.episode += 1
        self.turn = 0
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {} for a in self.agents}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def step(self, action: Any) -> None:
        a = self.agent_selection
        if self.terminations[a] or self.truncations[a]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[a] = 0.0
        for b in self.agents:
            self.rewards[b] = 1.0 + (float(action) if b == a else 0.0)
        self.turn += 1
        if self.turn >= self.horizon:
            self.truncations = {b: True for b in self.agents}
        self.agent_selection = self._selector.next()
        self._accumulate_rewards()


@pytest.mark.parametrize("k,horizon", [(1, 3), (2, 5), (3, 8), (3, 2)])
def test_aec_transition_ends_at_the_agents_next_turn(k: int, horizon: int) -> None:
    """A stored AEC transition runs from an agent's turn to its next one (or to the end),
    with everything it was paid in between: one per turn plus its own action."""
    envs = MultiAgentVectorEnv([lambda: Turns(k, horizon)] * 2)
    assert envs.aec
    buffer = make_buffer("replay", 10_000, envs.num_slots)
    col = MultiAgentCollector(ObsPolicy(), envs, buffer, seed=5, count_steps_by="agent_steps")
    stats = col.collect(n_step=60)
    batch, _ = _rows(buffer)
    obs, nxt = np.asarray(batch.obs), np.asarray(batch.obs_next)
    np.testing.assert_array_equal(nxt[:, :1], obs[:, :1])
    np.testing.assert_array_equal(np.asarray(batch.agent), obs[:, 2])
    np.testing.assert_allclose(
        np.asarray(batch.rew), (nxt[:, 1] - obs[:, 1]) + np.asarray(batch.act)
    )
    assert stats.n_step == len(obs) >= 60
    # each agent's turns are a lap apart, but the last transition ends with the game
    lap = np.minimum(obs[:, 1] + k, horizon)
    np.testing.assert_array_equal(nxt[:, 1], lap)
    assert np.asarray(batch.truncated).sum() == (np.asarray(batch.obs_next)[:, 1] == horizon).sum()
    np.testing.assert_array_equal(np.asarray(batch.truncated), nxt[:, 1] == horizon)


def test_agents_map_to_policies_with_their_own_buffers() -> None:
    envs = MultiAgentVectorEnv([lambda: Relay(3, 6)] * 2)
    pols = {"even": ObsPolicy(), "odd": ObsPolicy()}
    bufs = {n: make_buffer("replay", 10_000, envs.num_slots) for n in pols}
    col = MultiAgentCollector(
        pols, envs, bufs, mapping=lambda a: "even" if int(a[1:]) % 2 == 0 else "odd", seed=0
    )
    col.collect(n_step=50)
    even, _ = _rows(bufs["even"])
    odd, _ = _rows(bufs["odd"])
    assert set(np.asarray(even.agent).tolist()) <= {0, 2}
    assert set(np.asarray(odd.agent).tolist()) == {1}
    assert all(set(s.tolist()) <= {0, 2} for s in pols["even"].agents_seen)
    assert _check_transitions(bufs["even"], envs) + _check_transitions(bufs["odd"], envs) == (
        col.total_agent_steps
    )


def test_bad_mappings_and_settings_are_named() -> None:
    envs = MultiAgentVectorEnv([lambda: Relay(2, 4)])
    with pytest.raises(ConfigError, match="maps to policy 'nobody'"):
        MultiAgentCollector({"p": ObsPolicy()}, envs, mapping={"a0": "p", "a1": "nobody"})
    with pytest.raises(ConfigError, match="count_steps_by"):
        MultiAgentCollector(ObsPolicy(), envs, count_steps_by="frames")
    with pytest.raises(ConfigError, match="not a PettingZoo env"):
        MultiAgentVectorEnv([lambda: gym.make("CartPole-v1")])
    col = MultiAgentCollector(ObsPolicy(), envs)
    with pytest.raises(ValueError, match="single-agent batch modes"):
        col.collect(fragment=4)


def test_multiagent_ids() -> None:
    assert is_multiagent_id("mpe2.simple_spread_v3:parallel_env")
    assert is_multiagent_id("pettingzoo.classic.tictactoe_v3:env")
    assert not is_multiagent_id("CartPole-v1")
    assert not is_multiagent_id("my_module:MyEnv-v0")
    with pytest.raises(ConfigError, match="importing it runs its code"):
        multiagent_factory("some_unknown_module_xyz:parallel_env", trusted=False)
    with pytest.raises(ConfigError, match="cannot import"):
        multiagent_factory("some_unknown_module_xyz:parallel_env")


def test_wrapped_envs_pass_pettingzoo_api_tests() -> None:
    """PettingZoo's own API tests on the envs runs wrap (MPE's cooperative navigation, both
    APIs) with rlblocks' agent-id wrapper."""
    pytest.importorskip("mpe2")
    from mpe2 import simple_spread_v3
    from pettingzoo.test import api_test, parallel_api_test

    from rlblocks_family_pettingzoo import AgentIdObservation, AgentIdObservationAEC

    par = AgentIdObservation(simple_spread_v3.parallel_env(continuous_actions=False))
    parallel_api_test(par, num_cycles=100)
    api_test(AgentIdObservationAEC(simple_spread_v3.env(continuous_actions=False)), num_cycles=50)
    obs, _ = par.reset(seed=0)
    for i, a in enumerate(par.possible_agents):
        assert obs[a][-3:].tolist() == [float(j == i) for j in range(3)]
        assert par.observation_space(a).contains(obs[a])


class CountingPolicy(ObsPolicy):
    """A recurrent stand-in: its state counts the steps of the slot's agent episode."""

    def __call__(self, batch: Batch, state: Any = None) -> Batch:
        n = len(batch.obs)
        count = np.zeros(n) if state is None else np.asarray(state["n"])
        out = Batch(act=np.zeros(n, dtype=np.int64), state={"n": count + 1})
        out.policy = {"seen": count.copy()}
        return out


def test_recurrent_state_is_carried_per_slot_and_zeroed_at_agent_episode_ends() -> None:
    envs = MultiAgentVectorEnv([lambda: Relay(3, 6)] * 2)
    buffer = make_buffer("replay", 10_000, envs.num_slots)
    col = MultiAgentCollector(CountingPolicy(), envs, buffer, seed=2)
    col.collect(n_step=60)
    batch, _ = _rows(buffer)
    obs = np.asarray(batch.obs)
    birth = obs[:, 3]  # the agent's first step in its episode is at t == birth
    np.testing.assert_array_equal(np.asarray(batch.policy.seen), obs[:, 1] - birth)


def test_one_trainer_trains_a_policy_per_agent_group() -> None:
    """Policy mapping under the on-policy trainer: a PolicyGroup and a BufferGroup make two
    PPO policies (one for agent_0, one shared by the others) look like one."""
    pytest.importorskip("mpe2")
    import torch
    from mpe2 import simple_spread_v3

    from rlblocks.run import make_policy
    from rlblocks.trainers import OnPolicyTrainer
    from rlblocks_family_pettingzoo import BufferGroup, PolicyGroup

    make = lambda: simple_spread_v3.parallel_env(N=3, max_cycles=25, continuous_actions=False)  # noqa: E731
    train_envs, test_envs = MultiAgentVectorEnv([make] * 2), MultiAgentVectorEnv([make] * 2)
    space_o, space_a = train_envs.observation_space("agent_0"), train_envs.action_space("agent_0")
    torch.manual_seed(0)
    group = PolicyGroup(
        leader=make_policy("ppo", space_o, space_a), rest=make_policy("ppo", space_o, space_a)
    )
    buffers = BufferGroup({n: make_buffer("replay", 1_000, train_envs.num_slots) for n in group})
    mapping = {"agent_0": "leader", "agent_1": "rest", "agent_2": "rest"}
    before = {n: [q.detach().clone() for q in p.parameters()] for n, p in group.items()}
    collector = MultiAgentCollector(group, train_envs, buffers, mapping=mapping, seed=0)
    tester = MultiAgentCollector(group, test_envs, None, mapping=mapping, exploration=False)
    trainer = OnPolicyTrainer(
        group, collector, tester, buffers, step_per_collect=100, repeat_per_collect=2,
        batch_size=64, max_env_steps=300, test_interval=300, test_episodes=2,
    )  # fmt: skip
    result = trainer.run()
    assert result.env_steps == 300
    assert result.gradient_steps > 0
    for name, policy in group.items():
        assert any(not torch.equal(a, b) for a, b in zip(before[name], policy.parameters()))
    assert len(buffers) == 0  # emptied after each update, like one on-policy buffer
    state = group.state_dict()
    assert set(state) == {"leader", "rest"}
    group.load_state_dict(state)


def test_a_backend_that_cannot_hold_agents_is_refused_naming_subproc(tmp_path) -> None:
    # envpool builds its own envs, not PettingZoo's: refused, naming what works
    import rlblocks

    with pytest.raises(
        ConfigError, match=r"env.backend: 'envpool' cannot step multi-agent.*subproc or shmem"
    ):
        rlblocks.train(
            "ppo",
            env="pettingzoo.classic.rps_v2:parallel_env",
            backend="envpool",
            run_dir=tmp_path / "run",
            progress=False,
            loggers=[],
            quiet=True,
        )
    assert not (tmp_path / "run").exists()
