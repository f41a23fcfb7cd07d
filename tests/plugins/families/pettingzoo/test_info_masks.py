"""Action masks reported in a PettingZoo env's infos (``infos[agent]["action_mask"]``) reach
the masking algorithms through ``ActionMaskFromInfo`` (parallel) and ``ActionMaskFromInfoAEC``,
which move them into each agent's observation: a masked learner then never sends a masked
action, greedy or random, and a mask of the wrong size is named in one line."""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("pettingzoo")

from pettingzoo import ParallelEnv
from pettingzoo.test import parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

import rlblocks
from rlblocks.contracts import ConfigError
from rlblocks_family_pettingzoo import ActionMaskFromInfo, ActionMaskFromInfoAEC
from rlblocks_family_pettingzoo.multiagent import MultiAgentCollector, MultiAgentVectorEnv

N_ACTIONS = 6


class InfoMasked(ParallelEnv):
    """Two agents, six actions; each step's infos allow two random actions per agent and the
    env counts every action outside them (the episode ends after ``horizon`` steps)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "info_masked_v0", "render_modes": []}
    render_mode = None

    def __init__(self, horizon: int = 8, size: int = N_ACTIONS) -> None:
        self.possible_agents = ["a", "b"]
        self.horizon, self.size = horizon, size
        self.illegal = 0
        self.moves = 0
        self._rng = np.random.default_rng(0)
        self._obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self._act_space = gym.spaces.Discrete(N_ACTIONS)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> gym.spaces.Space:
        return self._act_space

    def _infos(self) -> dict[str, dict[str, Any]]:
        self._legal = {}
        for a in self.agents:
            mask = np.zeros(self.size, np.int8)
            mask[self._rng.choice(self.size, 2, replace=False)] = 1
            self._legal[a] = mask
        return {a: {"action_mask": self._legal[a]} for a in self.agents}

    def _obs(self) -> dict[str, np.ndarray]:
        return {a: self._rng.uniform(-1, 1, 3).astype(np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), self._infos()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for a, act in actions.items():
            self.moves += 1
            self.illegal += int(not self._legal[a][int(act)])
        self.t += 1
        done = self.t >= self.horizon
        obs, rew = self._obs(), {a: 0.0 for a in self.agents}
        term, trunc = {a: False for a in self.agents}, {a: done for a in self.agents}
        infos = self._infos()
        if done:
            self.agents = []
        return obs, rew, term, trunc, infos


def test_the_wrapped_env_passes_pettingzoo_api_tests_and_shows_the_mask() -> None:
    env = ActionMaskFromInfo(InfoMasked())
    parallel_api_test(env, num_cycles=20)
    obs, infos = env.reset(seed=1)
    for agent, o in obs.items():
        assert env.observation_space(agent).contains(o)
        np.testing.assert_array_equal(o["action_mask"], infos[agent]["action_mask"])


@pytest.mark.parametrize("random", [True, False], ids=["random", "policy"])
def test_a_masked_learner_never_sends_a_masked_action(random: bool) -> None:
    envs = MultiAgentVectorEnv([lambda: ActionMaskFromInfo(InfoMasked())] * 2)
    policy = rlblocks.make_policy(
        "ippo", envs.observation_space("a"), envs.action_space("a")
    )
    policy.train()
    collector = MultiAgentCollector(policy, envs, None, seed=0)
    collector.collect(n_step=60, random=random)
    moves = sum(e.env.moves for e in envs.envs)
    assert moves >= 100  # both agents of both envs acted all along
    assert sum(e.env.illegal for e in envs.envs) == 0
    # the same learner without the wrapper plays masked actions (the control)
    bare = MultiAgentVectorEnv([InfoMasked] * 2)
    unmasked = rlblocks.make_policy("ippo", bare.observation_space("a"), bare.action_space("a"))
    unmasked.train()
    MultiAgentCollector(unmasked, bare, None, seed=0).collect(n_step=60, random=random)
    assert sum(e.illegal for e in bare.envs) > 20


def test_the_aec_wrapper_reads_the_current_infos() -> None:
    env = ActionMaskFromInfoAEC(parallel_to_aec(InfoMasked()))
    env.reset(seed=3)
    seen = 0
    for agent in env.agent_iter(max_iter=12):
        obs, _rew, term, trunc, info = env.last()
        assert env.observation_space(agent).contains(obs)
        np.testing.assert_array_equal(obs["action_mask"], info["action_mask"])
        legal = np.flatnonzero(obs["action_mask"])
        env.step(None if term or trunc else int(legal[0]))
        seen += 1
    assert seen == 12


def test_a_mask_of_the_wrong_size_and_a_box_action_space_are_named() -> None:
    class Wrong(InfoMasked):
        def __init__(self) -> None:
            super().__init__(size=N_ACTIONS + 1)

    with pytest.raises(ConfigError, match=r"infos\['a'\]\['action_mask'\] has 7 entries.*needs 6"):
        ActionMaskFromInfo(Wrong()).reset(seed=0)

    class Continuous(InfoMasked):
        def action_space(self, agent: str) -> gym.spaces.Space:
            return gym.spaces.Box(-1, 1, (2,), np.float32)

    with pytest.raises(ConfigError, match=r"masks Discrete or MultiDiscrete.*leave the wrapper"):
        ActionMaskFromInfo(Continuous())
