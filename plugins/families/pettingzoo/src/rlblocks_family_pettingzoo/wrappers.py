"""PettingZoo-level wrappers (``env.wrappers`` of multi-agent runs). Needs ``pettingzoo``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper


def _with_id_space(space: gym.Space, n: int) -> gym.spaces.Box:
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        raise TypeError(f"AgentId wrappers take flat Box observations, got {space}")
    low = np.concatenate([space.low, np.zeros(n, dtype=space.dtype)])
    high = np.concatenate([space.high, np.ones(n, dtype=space.dtype)])
    return gym.spaces.Box(low, high, dtype=space.dtype)


def _with_id(obs: np.ndarray, i: int, n: int) -> np.ndarray:
    one_hot = np.zeros(n, dtype=obs.dtype)
    one_hot[i] = 1
    return np.concatenate([obs, one_hot])


def _id_spaces(env: Any) -> tuple[dict[str, int], dict[str, gym.spaces.Box]]:
    """Each agent's index, and its observation space with the one-hot appended."""
    index = {a: i for i, a in enumerate(env.possible_agents)}
    spaces = {a: _with_id_space(env.observation_space(a), len(index)) for a in index}
    return index, spaces


class AgentIdObservation(BaseParallelWrapper):
    """Appends a one-hot of the agent's index in ``possible_agents`` to its (flat Box)
    observation, so that one shared policy can act differently per agent (parameter sharing
    with agent ids)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._index, self._spaces = _id_spaces(env)
        self._n = len(self._index)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._spaces[agent]

    def _tag(self, obs: dict[str, Any]) -> dict[str, Any]:
        return {a: _with_id(o, self._index[a], self._n) for a, o in obs.items()}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._tag(obs), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rew, term, trunc, infos = self.env.step(actions)
        return self._tag(obs), rew, term, trunc, infos


class AgentIdObservationAEC(BaseWrapper):
    """:class:`AgentIdObservation` for AEC envs."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._index, self._spaces = _id_spaces(env)
        self._n = len(self._index)

    def observation_space(self, agent: str) -> gym.spaces.Box:
        return self._spaces[agent]

    def observe(self, agent: str) -> Any:
        obs = super().observe(agent)
        return None if obs is None else _with_id(obs, self._index[agent], self._n)
