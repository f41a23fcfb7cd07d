"""Fixtures the algorithm tests share."""

from __future__ import annotations

from collections.abc import Callable

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
