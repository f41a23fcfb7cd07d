"""A small env with action masks for the masking tests.

:class:`MaskedChoiceEnv`: ``Discrete(5)`` actions worth ``REWARDS`` (action 0 the most) over
episodes of ``LENGTH`` steps. Each step draws a fresh mask: actions 0-3 are legal with
probability one half each, action 4 (worth nothing) always. A masked action ends the episode
with ``ILLEGAL_REWARD``. With ``expose_mask`` (default) the observation is PettingZoo's Dict
``{"observation": Box, "action_mask": MultiBinary(5)}``; without it the observation is the Box
alone and the mask is hidden (the control: an agent that cannot see it takes illegal actions).
With ``mask_in_info`` the mask comes in ``info["action_mask"]`` instead of the observation.
The Box holds the time left and noise only: the mask is the one thing to act on.

Every illegal action any instance received is counted in :data:`ILLEGAL` (the dummy backend
steps envs in the test's process).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

REWARDS = np.array([1.0, 0.5, 0.25, 0.1, 0.0])
LENGTH = 10
ILLEGAL_REWARD = -5.0
#: the best legal action's expected reward per step (0.5 + 0.25*0.5 + ...), times LENGTH
OPTIMAL_RETURN = LENGTH * sum(REWARDS[k] * 0.5 ** (k + 1) for k in range(4))

#: illegal actions received, over every instance: {"count": n}
ILLEGAL = {"count": 0}


class MaskedChoiceEnv(gym.Env):
    """See the module docstring."""

    def __init__(self, expose_mask: bool = True, mask_in_info: bool = False) -> None:
        self.expose_mask = expose_mask and not mask_in_info
        self.mask_in_info = mask_in_info
        box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(5)
        self.observation_space: gym.Space = (
            gym.spaces.Dict({"observation": box, "action_mask": gym.spaces.MultiBinary(5)})
            if self.expose_mask
            else box
        )
        self._t = 0
        self._mask = np.ones(5, dtype=np.int8)

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self._mask = np.ones(5, dtype=np.int8)
        self._mask[:4] = self.np_random.random(4) < 0.5
        box = np.array([1.0 - self._t / LENGTH, self.np_random.uniform(-1, 1)], np.float32)
        info = {"action_mask": self._mask.copy()} if self.mask_in_info else {}
        if self.expose_mask:
            return {"observation": box, "action_mask": self._mask.copy()}, info
        return box, info

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self._t = 0
        return self._draw()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        a = int(action)
        self._t += 1
        if not self._mask[a]:
            ILLEGAL["count"] += 1
            obs, info = self._draw()
            return obs, ILLEGAL_REWARD, True, False, info
        rew = float(REWARDS[a])
        obs, info = self._draw()
        return obs, rew, False, self._t >= LENGTH, info


def masked_env() -> MaskedChoiceEnv:
    return MaskedChoiceEnv()


def unmasked_env() -> MaskedChoiceEnv:
    return MaskedChoiceEnv(expose_mask=False)


def info_masked_env() -> MaskedChoiceEnv:
    return MaskedChoiceEnv(mask_in_info=True)
