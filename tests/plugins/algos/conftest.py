"""Fixtures the algorithm tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlblocks.batch import Batch
from rlblocks.buffer import ReplayBuffer


@pytest.fixture
def random_buffer() -> Callable[..., ReplayBuffer]:
    """``make(act_space, n=64)``: a one-env buffer of ``n`` random, unfinished transitions with
    3-float observations and actions from ``act_space`` (seeded, so every call is the same)."""

    def make(act_space: gym.Space, n: int = 64) -> ReplayBuffer:
        rng = np.random.default_rng(0)
        act_space.seed(0)
        buf = ReplayBuffer(n)
        for _ in range(n):
            buf.add(
                Batch(
                    obs=rng.uniform(-1, 1, 3).astype(np.float32),
                    act=np.asarray(act_space.sample()),
                    rew=float(rng.normal()),
                    terminated=False,
                    truncated=False,
                    obs_next=rng.uniform(-1, 1, 3).astype(np.float32),
                )
            )
        return buf

    return make


@pytest.fixture
def episode_buffer() -> Callable[..., ReplayBuffer]:
    """``make(episode, act=lambda t: t % 2)``: a one-env buffer of one episode whose step ``t``
    has obs ``[t, 0, 0]``, obs_next ``[t + 1, 0, 0]`` (float32) and action ``act(t)``;
    ``episode`` lists (rew, terminated, truncated) per step."""

    def make(
        episode: list[tuple[float, bool, bool]], act: Callable[[int], Any] = lambda t: t % 2
    ) -> ReplayBuffer:
        buf = ReplayBuffer(32)
        for t, (rew, term, trunc) in enumerate(episode):
            buf.add(
                Batch(
                    obs=np.array([t, 0, 0], np.float32),
                    act=act(t),
                    rew=rew,
                    terminated=term,
                    truncated=trunc,
                    obs_next=np.array([t + 1, 0, 0], np.float32),
                )
            )
        return buf

    return make


@pytest.fixture
def quantile_huber_reference() -> Callable[..., float]:
    """``loss(pred, target, taus, kappa, probs=None)``: the quantile Huber loss of one sample,
    written out loop by loop. Quantile ``i`` at fraction ``taus[i]`` predicts ``pred[i]``; target
    sample ``j`` weighs ``probs[j]`` (default: all equal); ``kappa == 0`` is the plain quantile
    loss. The Huber term is divided by ``kappa``, as QR-DQN, IQN and FQF define it."""

    def loss(
        pred: np.ndarray,
        target: np.ndarray,
        taus: np.ndarray,
        kappa: float,
        probs: np.ndarray | None = None,
    ) -> float:
        probs = np.full(len(target), 1 / len(target)) if probs is None else probs
        total = 0.0
        for i, tau in enumerate(taus):
            for z, prob in zip(target, probs):
                u = z - pred[i]
                if kappa == 0:  # the plain quantile loss
                    huber = abs(u)
                elif abs(u) <= kappa:
                    huber = 0.5 * u * u / kappa
                else:
                    huber = abs(u) - 0.5 * kappa
                total += prob * abs(tau - (1.0 if u < 0 else 0.0)) * huber
        return total

    return loss
