"""Atari as the literature runs it: ale-py's ``ALE/*`` envs through gymnasium's own preprocessing,
frames stored once and stacked by the buffer, and the presets of the papers.

The pipeline (Machado et al., 2018, "Revisiting the Arcade Learning Environment"):

* ``gymnasium.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=p)``: sticky actions
  with probability ``p`` (0.25 in v5, Machado et al.'s recommendation; 0 in the Atari 100k
  protocol), the minimal action set;
* gymnasium's ``AtariPreprocessing``: up to 30 no-op actions at reset, an action repeated for 4
  frames with the last two max-pooled, 84x84 greyscale ``uint8`` observations;
* training envs only (``env.train_wrappers``): rewards clipped to [-1, 1] and, as an option,
  :class:`EpisodicLife` (a lost life ends the learning episode, the game goes on); test envs
  report the game's own score over whole games;
* ``buffer.stack_num = 4``: the buffer stores each 84x84 frame once (``ignore_obs_next``: the next
  observation is the next step's) and reads the last 4 frames of an episode as one ``[4, 84, 84]``
  observation, the first frame repeated at an episode's start; the collector hands the policy the
  same stacks while acting (:func:`rlblocks.contracts.frame_stack_views`), so nothing stacked is
  stored and acting and training see the same values.
* the image encoder of every value-based algorithm is the Nature-DQN body (Mnih et al., 2015).

The presets (:func:`atari_presets`, :func:`atari100k_config`) are plain config dicts; the
algorithms' specs take them as ``env_defaults`` for ``ALE/*`` ids, so ``rlblocks train rainbow
--env ALE/Pong-v5`` runs the Rainbow paper's settings. Needs ``pip install 'rlblocks[atari]'``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from rlblocks.run._env_families import ATARI_ENVS, atari100k_config, atari_env_config, atari_presets

__all__ = [
    "ATARI_ENVS",
    "EpisodicLife",
    "FireReset",
    "atari100k_config",
    "atari_env_config",
    "atari_presets",
    "make_atari",
]


def _lives(env: gym.Env) -> int:
    """The lives the ALE game under ``env`` has left (0 in games without lives)."""
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode for learning (``terminated``), but the game goes on: the
    next ``reset()`` (without a seed) continues from where the life was lost, and only a real
    game over resets the game (Mnih et al., 2015). Put it on training envs only: test episodes
    should be whole games."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        self._last_obs: Any = None

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, rew, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _lives(self.env)
        if 0 < lives < self.lives:
            terminated = True  # the game may go on, the learning episode ends
        self.lives = lives
        self._last_obs = obs
        return obs, rew, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if self.game_over or seed is not None or self._last_obs is None:
            obs, info = self.env.reset(seed=seed, options=options)
            self.game_over = False
        else:  # a life was lost: carry on from the current frame
            obs, info = self._last_obs, {}
        self.lives = _lives(self.env)
        self._last_obs = obs
        return obs, info

    def snapshot_state(self) -> dict[str, Any]:
        """Plain values for :mod:`rlblocks.collect` (exact resume)."""
        return {"lives": self.lives, "game_over": self.game_over, "last_obs": self._last_obs}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.lives = int(state["lives"])
        self.game_over = bool(state["game_over"])
        self._last_obs = state["last_obs"]


class FireReset(gym.Wrapper):
    """Presses FIRE once after every reset and after every lost life, in games whose action set
    has it (Breakout waits for it to launch the ball at each new life): a greedy test policy
    that never learnt to fire would otherwise stall until the 108k-frame limit. The press is one
    hidden step whose reward is added to the step that lost the life; it does the same in
    training envs, whichever side of :class:`EpisodicLife` it sits on, so every life starts
    the same way in training and in test."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        self.fire = meanings.index("FIRE") if "FIRE" in meanings else None
        self.lives = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.env.reset(seed=seed, options=options)
        if self.fire is not None:
            obs, _, terminated, truncated, _ = self.env.step(self.fire)
            if terminated or truncated:  # the press ended the episode (it cannot in practice)
                obs, info = self.env.reset(options=options)
        self.lives = _lives(self.env)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, rew, terminated, truncated, info = self.env.step(action)
        if self.fire is None:
            return obs, rew, terminated, truncated, info
        lives = _lives(self.env)
        if lives < self.lives and not (terminated or truncated):
            obs, fire_rew, terminated, truncated, info = self.env.step(self.fire)
            rew = rew + fire_rew
            lives = _lives(self.env)
        self.lives = lives
        return obs, rew, terminated, truncated, info

    def snapshot_state(self) -> dict[str, Any]:
        """The lives seen last (for :mod:`rlblocks.collect`)."""
        return {"lives": self.lives}

    def restore_state(self, state: dict[str, Any]) -> None:
        self.lives = int(state.get("lives", 0))


def make_atari(
    env_id: str,
    *,
    train: bool,
    sticky: float | None = None,
    episodic_life: bool = False,
    clip_rewards: bool = True,
    noop_max: int = 30,
    frame_skip: int = 4,
    screen_size: int = 84,
    full_action_space: bool = False,
    fire_reset: bool = False,
    **make_kwargs: Any,
) -> gym.Env:
    """One env of the pipeline above (84x84 ``uint8`` frames, no stacking): what rlblocks' runs
    make from :func:`atari_env_config`, for scripts and other libraries. ``train=False`` leaves
    out the training-only wrappers (reward clipping, episodic life)."""
    from rlblocks.run._compose import make_env_fns

    section = atari_env_config(
        sticky, episodic_life, clip_rewards, noop_max, frame_skip, screen_size,
        full_action_space, fire_reset,
    )  # fmt: skip
    wrappers = section["wrappers"] + (section["train_wrappers"] if train else [])
    return make_env_fns(env_id, 1, {**section["make_kwargs"], **make_kwargs}, wrappers)[0]()
