"""Datasets the offline algorithms' training tests make for themselves: a hand-written good
controller of Pendulum-v1 or CartPole-v1 whose actions are replaced, step by step, by poor ones.

Behaviour cloning of such a mixture copies the poor actions along with the good ones; an
algorithm that weighs the dataset's actions by what a critic says they are worth can pick the
good ones out. The controllers need no training, so a dataset costs a second or two.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

from rlblocks.contracts import Batch
from rlblocks.replay import ReplayBuffer

#: Pendulum-v1's physics: theta'' = 3g / (2l) sin(theta) + 3 / (m l^2) u, with g = 10, m = l = 1
_PENDULUM_GRAVITY_TERM = 15.0


def pendulum_controller(obs: np.ndarray) -> np.ndarray:
    """Torques in [-2, 2] for Pendulum-v1 observations ``[B, 3]`` (cos, sin, angular velocity):
    near the top a PD controller holds the pole up; elsewhere energy pumping (torque along the
    velocity while the energy is short of the upright pole's) swings it up. Mean return about
    -150 on random starts (a random policy: about -1,200)."""
    obs = np.atleast_2d(obs)
    cos, sin, vel = obs[:, 0], obs[:, 1], obs[:, 2]
    theta = np.arctan2(sin, cos)  # 0 is upright
    energy = 0.5 * vel**2 + _PENDULUM_GRAVITY_TERM * (cos - 1.0)  # 0 for the resting upright pole
    pump = np.where(np.abs(vel) < 0.1, 2.0, -energy * vel)  # a kick when at rest at the bottom
    hold = -(10.0 * theta + 2.0 * vel)
    return np.clip(np.where(cos > 0.85, hold, pump), -2.0, 2.0)


def cartpole_controller(obs: np.ndarray) -> np.ndarray:
    """Actions (0: push left, 1: push right) for CartPole-v1 observations ``[B, 4]``: push
    towards where the pole is falling, with a little pull back to the centre. Balances all
    500 steps from every start tried."""
    obs = np.atleast_2d(obs)
    x, x_dot, theta, theta_dot = obs[:, 0], obs[:, 1], obs[:, 2], obs[:, 3]
    return (theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0).astype(np.int64)


def mixture_dataset(
    env_id: str,
    good: Callable[[np.ndarray], np.ndarray],
    poor: Callable[[np.ndarray, np.random.Generator], np.ndarray],
    poor_share: float,
    steps: int,
    seed: int = 0,
    to_buffer: Callable[[np.ndarray], np.ndarray] = lambda a: a,
) -> tuple[ReplayBuffer, float]:
    """``steps`` transitions of ``env_id`` played by ``good`` with each action replaced by one
    of ``poor`` (given the observation and a generator) with probability ``poor_share``;
    ``to_buffer`` turns an env action into the stored one (the policy's [-1, 1] units for a
    Box). Returns the buffer and the mean return of the episodes finished meanwhile."""
    rng = np.random.default_rng(seed)
    env = gym.make(env_id)
    rows: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "terminated", "truncated")}
    rows["obs_next"] = []
    returns: list[float] = []
    obs, _ = env.reset(seed=seed)
    episode_return = 0.0
    for _ in range(steps):
        row = obs[None]
        act = poor(row, rng)[0] if rng.random() < poor_share else good(row)[0]
        obs_next, rew, terminated, truncated, _ = env.step(act)
        for key, value in (("obs", obs), ("act", to_buffer(np.asarray(act))), ("rew", rew),
                           ("terminated", terminated), ("truncated", truncated),
                           ("obs_next", obs_next)):  # fmt: skip
            rows[key].append(value)
        episode_return += float(rew)
        obs = obs_next
        if terminated or truncated:
            returns.append(episode_return)
            episode_return = 0.0
            obs, _ = env.reset()
    env.close()
    buf = ReplayBuffer(steps, seed=seed)
    columns = {key: np.asarray(values) for key, values in rows.items()}
    columns["rew"] = columns["rew"].astype(np.float32)
    buf.extend(Batch(**columns), np.zeros(steps, np.int64))
    return buf, float(np.mean(returns)) if returns else float("nan")


def pendulum_mixture(poor_share: float = 0.7, steps: int = 10_000, seed: int = 0):
    """Pendulum-v1 played by :func:`pendulum_controller` with a share of uniformly random
    torques; actions stored in [-1, 1] (torque / 2)."""
    return mixture_dataset(
        "Pendulum-v1",
        lambda o: pendulum_controller(o)[:, None],
        lambda o, rng: rng.uniform(-2.0, 2.0, (len(o), 1)),
        poor_share,
        steps,
        seed,
        to_buffer=lambda a: (a / 2.0).astype(np.float32),
    )


def cartpole_mixture(poor_share: float = 0.6, steps: int = 10_000, seed: int = 0):
    """CartPole-v1 played by :func:`cartpole_controller` with a share of its actions replaced
    by "push left" (a biased poor policy: greedy behaviour cloning then always pushes left)."""
    return mixture_dataset(
        "CartPole-v1",
        cartpole_controller,
        lambda o, rng: np.zeros(len(o), np.int64),
        poor_share,
        steps,
        seed,
    )


def train_offline(
    algo: str,
    env_id: str,
    data: ReplayBuffer,
    max_gradient_steps: int,
    stop_reward: float | None = None,
    seed: int = 1,
    **algo_options: object,
):
    """Train ``algo`` (made with ``algo_options``) on ``data`` with the OfflineTrainer: batches
    of 128, a test of 10 episodes on 10 envs of ``env_id`` every 1,000 gradient steps, until a
    test reaches ``stop_reward`` or the budget is spent. Returns the result and the policy."""
    import torch

    import rlblocks
    from rlblocks.collect import Collector
    from rlblocks.trainers import OfflineTrainer

    test_envs = rlblocks.make_vector_env("dummy", env_id, num_envs=10, seed=100)
    try:
        torch.manual_seed(seed)
        policy = rlblocks.make_policy(
            algo, test_envs.observation_space, test_envs.action_space, **algo_options
        )
        result = OfflineTrainer(
            policy,
            Collector(policy, test_envs, None, exploration=False, seed=100),
            data,
            max_gradient_steps=max_gradient_steps,
            batch_size=128,
            test_interval=1_000,
            test_episodes=10,
            stop_reward=stop_reward,
        ).run()
        return result, policy
    finally:
        test_envs.close()
