"""Discrete and MultiDiscrete action spaces whose values start elsewhere than 0: the trainer's
whole path (random warm-up, exploration, tests, the agent) sends actions inside the space, and
what a policy stores is the index it learns from, so it learns which action pays."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import rlblocks
from rlblocks.contracts import ConfigError


class StartBandit(gym.Env):
    """Each step shows a target per action dimension (one-hot) and pays the fraction of
    dimensions where the action is ``start + target``; episodes of 10 steps. An action outside
    the space is refused, as a strict env does."""

    def __init__(self, space: gym.spaces.Discrete | gym.spaces.MultiDiscrete) -> None:
        self.action_space = space
        sizes = space.n if isinstance(space, gym.spaces.Discrete) else space.nvec
        self.sizes = np.atleast_1d(sizes)
        self.starts = np.atleast_1d(np.asarray(space.start))
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(self.sizes.sum()),), np.float32)

    def _show(self) -> np.ndarray:
        self.target = np.array([self.np_random.integers(n) for n in self.sizes])
        obs = np.zeros(int(self.sizes.sum()), np.float32)
        obs[np.cumsum(self.sizes) - self.sizes + self.target] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._show(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)):
            raise ValueError(f"action {action!r} outside {self.action_space}")
        right = np.atleast_1d(np.asarray(action)) == self.starts + self.target
        self.t += 1
        return self._show(), float(right.mean()), False, self.t >= 10, {}


SPACES = {
    "below": gym.spaces.Discrete(3, start=-1),
    "above": gym.spaces.Discrete(3, start=2),
    "multi": gym.spaces.MultiDiscrete([3, 2], start=[-2, 1]),
}
RUNS = [
    ("dqn", "below", ["trainer.warmup_steps=300", "algo.eps_decay_steps=1500"]),
    ("ppo", "above", []),
    ("ppo", "multi", []),
]


@pytest.mark.parametrize(("algo", "space", "overrides"), RUNS)
def test_an_algorithm_learns_which_action_pays_on_a_space_with_a_start(
    algo: str, space: str, overrides: list[str], tmp_path
) -> None:
    result = rlblocks.train(
        algo,
        env=lambda: StartBandit(SPACES[space]),
        seed=0,
        max_env_steps=4000,
        overrides=["env.num_envs=4", "trainer.test_interval=1000", *overrides],
        run_dir=tmp_path / "run",
        progress=False,
        loggers=[],
    )
    ev = result.agent.evaluate(episodes=8, seed=1)
    assert ev.mean >= 9.5, ev  # out of 10: the right action nearly always (chance: 3.3 to 5)
    # the agent acts in the env's values too, and will not play an env with other ones
    obs, _ = StartBandit(SPACES[space]).reset(seed=2)
    assert SPACES[space].contains(np.asarray(result.agent.act(obs), dtype=SPACES[space].dtype))
    if space == "below":
        with pytest.raises(ConfigError, match=r"action space Discrete\(3\), but .* acts on "
                                              r"Discrete\(3, start=-1\)"):  # fmt: skip
            result.agent.evaluate(env=lambda: StartBandit(gym.spaces.Discrete(3)), episodes=1)
