"""Action masks: which actions are legal in an observation, where they come from and how
random actions honour them.

rlblocks reads one convention, PettingZoo's: the observation is a ``Dict`` with the key
``"action_mask"`` (int8 or bool, 1 = legal), next to the features (``"observation"``, or any
other keys). For a ``MultiDiscrete`` action space the mask holds one mask per sub-space,
concatenated (``sum(nvec)`` entries), or one row per sub-space (``[len(nvec), n]`` when each has
``n`` actions, as a joint view of agents gives it). An env that reports its mask in the step's
``info["action_mask"]`` instead is wrapped once by :class:`ActionMaskFromInfo`, which moves the
mask into such a Dict observation: from there on the mask travels with the observation, so the
collector acts on it, the buffer stores it with ``obs`` and ``obs_next`` (n-step targets read
the bootstrap row's ``obs_next["action_mask"]`` for free) and the encoders leave it out of the
features.

A row whose mask allows nothing (the last observation of a finished game often does) counts
every action as legal: nothing is acted on there, and targets stay finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts._errors import ConfigError

__all__ = [
    "ACTION_MASK_KEY",
    "ActionMaskFromInfo",
    "action_mask_of",
    "check_action_mask_space",
    "has_action_mask",
    "mask_size",
    "random_legal_actions",
]

#: the observation key (and info key) that holds an action mask
ACTION_MASK_KEY = "action_mask"


def has_action_mask(space: gym.Space) -> bool:
    """Whether observations of ``space`` carry an action mask (a Dict with ``action_mask``)."""
    return isinstance(space, gym.spaces.Dict) and ACTION_MASK_KEY in space.spaces


def action_mask_of(obs: Any) -> Any:
    """The action mask in a batch of observations (arrays or tensors), None when it has none."""
    if isinstance(obs, Mapping) or hasattr(obs, "keys"):
        try:
            return obs[ACTION_MASK_KEY]
        except KeyError:
            return None
    return None


def mask_size(action_space: gym.Space) -> int | None:
    """Entries of a mask for ``action_space``: ``n`` (Discrete), ``sum(nvec)`` (MultiDiscrete);
    None for spaces that cannot be masked."""
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return None


def check_action_mask_space(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Refuse an ``action_mask`` entry that does not fit the action space (a mask needs a
    Discrete or MultiDiscrete action space and one entry per action)."""
    if not has_action_mask(observation_space):
        return
    mask_space = observation_space.spaces[ACTION_MASK_KEY]  # type: ignore[attr-defined]
    size = mask_size(action_space)
    if size is None:
        raise ConfigError(
            f"the env's observations carry an action_mask, but its action space {action_space} "
            "is not Discrete or MultiDiscrete, which are the ones a mask can mask; drop the "
            "mask with a wrapper (env.wrappers)"
        )
    shape = getattr(mask_space, "shape", None)
    if shape is None or int(np.prod(shape)) != size:
        raise ConfigError(
            f"the env's action_mask space {mask_space} should hold one entry per action "
            f"({size} for {action_space}: for MultiDiscrete one mask per sub-space, concatenated "
            "or one row each); fix the env's observation space"
        )


def _legal(mask: np.ndarray) -> np.ndarray:
    """``mask`` as bools, with rows that allow nothing allowing everything."""
    legal = np.asarray(mask) != 0
    empty = ~legal.any(axis=-1, keepdims=True)
    return legal | empty


def random_legal_actions(
    mask: np.ndarray, action_space: gym.Space, rng: np.random.Generator
) -> np.ndarray:
    """One uniformly random legal action per row of ``mask [N, size]``, in the env's units
    (the space's ``start`` added): ``[N]`` for Discrete, ``[N, len(nvec)]`` for MultiDiscrete."""
    mask = np.asarray(mask).reshape(len(mask), -1)
    if isinstance(action_space, gym.spaces.Discrete):
        return _pick(_legal(mask), rng) + int(action_space.start)
    assert isinstance(action_space, gym.spaces.MultiDiscrete)
    nvec = np.asarray(action_space.nvec).reshape(-1)
    bounds = np.cumsum(nvec)[:-1]
    parts = np.split(mask, bounds, axis=1)
    out = np.stack([_pick(_legal(p), rng) for p in parts], axis=1)
    start = np.asarray(action_space.start).reshape(-1)
    return (out + start).astype(action_space.dtype).reshape((len(mask), *action_space.shape))


def _pick(legal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The index of a uniformly chosen True entry of each row of ``legal`` (one draw per row)."""
    counts = legal.sum(axis=1)
    k = (rng.random(len(legal)) * counts).astype(np.int64)  # the k-th legal action, k < count
    k = np.minimum(k, counts - 1)
    ranks = np.cumsum(legal, axis=1) - 1  # rank of each legal entry among its row's
    return np.argmax(legal & (ranks == k[:, None]), axis=1).astype(np.int64)


class ActionMaskFromInfo(gym.ObservationWrapper):
    """Moves ``info["action_mask"]`` into the observation: ``{"observation": obs,
    "action_mask": mask}``, the form every masking algorithm reads (see the module docstring).
    Add it to ``env.wrappers`` for an env that reports its mask in the step's and the reset's
    info; a step or reset without the key allows every action."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        size = mask_size(env.action_space)
        if size is None:
            raise ConfigError(
                f"ActionMaskFromInfo masks Discrete or MultiDiscrete actions, and the env's action "
                f"space is {env.action_space}; leave the wrapper out"
            )
        self._size = size
        self.observation_space = gym.spaces.Dict(
            {"observation": env.observation_space,
             ACTION_MASK_KEY: gym.spaces.MultiBinary(size)}
        )  # fmt: skip
        self._mask: np.ndarray = np.ones(size, dtype=np.int8)

    def _take(self, info: Any) -> None:
        mask = info.get(ACTION_MASK_KEY) if isinstance(info, Mapping) else None
        if mask is None:
            self._mask = np.ones(self._size, dtype=np.int8)
            return
        mask = np.asarray(mask, dtype=np.int8).reshape(-1)
        if mask.shape != (self._size,):
            raise ConfigError(
                f"info['action_mask'] has {mask.size} entries and the action space "
                f"{self.env.action_space} needs {self._size}; fix the env's mask"
            )
        self._mask = mask

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._take(info)
        return self.observation(obs), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, rew, terminated, truncated, info = self.env.step(action)
        self._take(info)
        return self.observation(obs), rew, terminated, truncated, info

    def observation(self, observation: Any) -> dict[str, Any]:
        return {"observation": observation, ACTION_MASK_KEY: self._mask.copy()}
