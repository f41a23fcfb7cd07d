"""PettingZoo-level wrappers (``env.wrappers`` of multi-agent runs). Needs ``pettingzoo``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper

from rlblocks.contracts import ACTION_MASK_KEY, ConfigError, mask_size


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


def _masked_spaces(env: Any) -> dict[str, gym.spaces.Dict]:
    """Each agent's observation space as ``{"observation": ..., "action_mask": MultiBinary}``."""
    out = {}
    for agent in env.possible_agents:
        size = mask_size(env.action_space(agent))
        if size is None:
            raise ConfigError(
                f"ActionMaskFromInfo masks Discrete or MultiDiscrete actions, and agent {agent!r} "
                f"acts in {env.action_space(agent)}; leave the wrapper out"
            )
        out[agent] = gym.spaces.Dict(
            {"observation": env.observation_space(agent),
             ACTION_MASK_KEY: gym.spaces.MultiBinary(size)}
        )  # fmt: skip
    return out


def _with_mask(space: gym.spaces.Dict, obs: Any, info: Any, agent: str) -> dict[str, Any]:
    """``obs`` with the mask ``info["action_mask"]`` (every action allowed without one)."""
    size = space[ACTION_MASK_KEY].n
    mask = info.get(ACTION_MASK_KEY) if isinstance(info, dict) else None
    if mask is None:
        mask = np.ones(size, dtype=np.int8)
    else:
        mask = np.asarray(mask, dtype=np.int8).reshape(-1)
        if mask.shape != (size,):
            raise ConfigError(
                f"infos[{agent!r}]['action_mask'] has {mask.size} entries and agent {agent!r}'s "
                f"action space needs {size}; fix the env's mask"
            )
    return {"observation": obs, ACTION_MASK_KEY: mask}


class ActionMaskFromInfo(BaseParallelWrapper):
    """Moves each agent's ``infos[agent]["action_mask"]`` into its observation,
    ``{"observation": obs, "action_mask": mask}``: the form every masking algorithm reads,
    for a parallel env that reports masks in its infos (PettingZoo's classic games put them in
    the observation already). A reset or step without the key allows every action; the
    multi-agent counterpart of :class:`rlblocks.contracts.ActionMaskFromInfo`."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._spaces = _masked_spaces(env)

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._spaces[agent]

    def _masked(self, obs: dict[str, Any], infos: dict[str, Any]) -> dict[str, Any]:
        return {a: _with_mask(self._spaces[a], o, infos.get(a), a) for a, o in obs.items()}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._masked(obs, infos), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rew, term, trunc, infos = self.env.step(actions)
        return self._masked(obs, infos), rew, term, trunc, infos


class ActionMaskFromInfoAEC(BaseWrapper):
    """:class:`ActionMaskFromInfo` for AEC envs: an agent's observation carries the mask of
    its current ``infos[agent]``."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._spaces = _masked_spaces(env)

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._spaces[agent]

    def observe(self, agent: str) -> Any:
        obs = super().observe(agent)
        if obs is None:
            return None
        return _with_mask(self._spaces[agent], obs, self.infos.get(agent), agent)
