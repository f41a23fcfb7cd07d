"""A corridor of ``length`` cells with its only reward at the far end: exploration's test bed.

The agent starts in cell 0 and moves one cell along with each action (stepping back from cell 0
stays there). Which of the two actions moves forward differs from cell to cell (a fixed pattern,
the same in every episode, as in a combination lock), so no single action repeated (a drift of
the policy's bias) walks the corridor: each cell's forward action must be found. Reaching the
last cell pays 1 and ends the episode, every other step pays 0, and an episode is cut after
``horizon`` steps. Observations are the cell index (Discrete), so a policy sees each cell as a
new state. A uniformly random walk of 20 cells in 26 steps reaches the end about once in 7,000
episodes, of 25 cells in 30 steps in none of 200,000, so an agent that explores by chance (an
entropy bonus, epsilon-greedy) does not see the reward within a CI budget.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Corridor(gym.Env[np.int64, np.int64]):
    """Moves along ``length`` cells (the forward action of each cell fixed by ``pattern_seed``);
    reward 1 only at the far end."""

    def __init__(self, length: int = 20, horizon: int = 26, pattern_seed: int = 0) -> None:
        self.length = length
        self.horizon = horizon
        #: the action that moves forward in each cell: random, but never the same in three cells
        #: in a row, so a policy that favours one action everywhere is soon turned back
        forward = np.random.default_rng(pattern_seed).integers(0, 2, length)
        for i in range(2, length):
            if forward[i] == forward[i - 1] == forward[i - 2]:
                forward[i] = 1 - forward[i]
        self.forward = forward
        self.observation_space = gym.spaces.Discrete(length)
        self.action_space = gym.spaces.Discrete(2)
        self._pos = 0
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.int64, dict[str, Any]]:
        super().reset(seed=seed)
        self._pos, self._t = 0, 0
        return np.int64(self._pos), {}

    def step(self, action: Any) -> tuple[np.int64, float, bool, bool, dict[str, Any]]:
        ahead = int(action) == int(self.forward[self._pos])
        self._pos = max(0, self._pos + (1 if ahead else -1))
        self._t += 1
        goal = self._pos == self.length - 1
        return np.int64(self._pos), float(goal), goal, self._t >= self.horizon and not goal, {}


def long_corridor() -> Corridor:
    """The corridor the ICM test trains on: 25 cells, 30 steps an episode."""
    return Corridor(length=25, horizon=30)
