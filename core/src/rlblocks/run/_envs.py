"""Small envs of rlblocks' own, registered with gymnasium when this module is imported.

* ``rlblocks/MaskedCartPole-v1`` — :class:`MaskedCartPole`: CartPole-v1 that shows only the
  cart position and the pole angle. The velocities are hidden, so a memoryless policy cannot
  tell which way the pole is falling; a recurrent policy infers them from the last few
  observations. The standard check that memory works, solved at the same 475 as CartPole-v1.

Importing ``rlblocks.envs`` registers them; experiments name these ids like any other, and
the env construction (``rlblocks.run``) imports this module for ids in the ``rlblocks/``
namespace (``rlblocks.compose.ENV_NAMESPACES``), also in env worker processes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

__all__ = ["MASKED_CARTPOLE_ID", "MaskedCartPole"]

MASKED_CARTPOLE_ID = "rlblocks/MaskedCartPole-v1"


class MaskedCartPole(gym.ObservationWrapper):
    """CartPole with its velocities removed: observations are ``[cart position, pole angle]``
    (CartPole's entries 0 and 2), float32, of shape ``(2,)``.

    ``MaskedCartPole()`` builds its own ``CartPoleEnv`` (keyword arguments go to it, e.g.
    ``render_mode``); ``MaskedCartPole(env)`` masks an existing CartPole (or a wrapped one).
    Dynamics, rewards, episode ends and seeding are CartPole's, so for the same seed and actions
    the observations are exactly CartPole's positions."""

    #: the observation entries kept: cart position and pole angle
    KEEP: tuple[int, ...] = (0, 2)

    def __init__(self, env: gym.Env | None = None, **cartpole_kwargs: Any) -> None:
        if env is None:
            env = CartPoleEnv(**cartpole_kwargs)
        elif cartpole_kwargs:
            raise TypeError("pass either an env to wrap or CartPoleEnv keyword arguments, not both")
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or space.shape != (4,):
            raise ValueError(f"MaskedCartPole wraps CartPole's Box(4,) observations, got {space}")
        keep = list(self.KEEP)
        self._keep = np.asarray(keep)
        self.observation_space = gym.spaces.Box(
            low=space.low[keep], high=space.high[keep], dtype=np.float32
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """CartPole's observation without its velocities."""
        return np.asarray(observation, dtype=np.float32)[self._keep]

    # The mask keeps no state of its own; these methods tell rlblocks.collect so, which lets a
    # resumed run put the env (the CartPoleEnv inside is snapshotted itself) back exactly.
    def snapshot_state(self) -> dict[str, Any]:
        """Nothing to save: the wrapper is stateless."""
        return {}

    def restore_state(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the wrapper is stateless."""


def _register() -> None:
    if MASKED_CARTPOLE_ID not in gym.registry:
        gym.register(
            id=MASKED_CARTPOLE_ID,
            entry_point="rlblocks.run:MaskedCartPole",
            max_episode_steps=500,
            reward_threshold=475.0,
        )


_register()
