"""Deliberately broken algorithms for the conformance kit's check of discrete spaces with a
``start`` (each breaks one rule the way a real bug did)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks.contracts import Batch
from rlblocks_algo_dqn.dqn import DQNPolicy
from rlblocks_algo_ppo.ppo import PPOPolicy


class IndexSendingPPO(PPOPolicy):
    """PPO as it was: sends its network's index (0 .. n-1) to the env, whatever the space's
    start."""

    def map_action(self, act: np.ndarray) -> np.ndarray:
        return act


class StartTwiceDQN(DQNPolicy):
    """Adds the start itself (an algorithm written when policies acted in env units), so the
    env gets it twice."""

    def forward(self, batch: Batch, state: Any = None, **kwargs: Any) -> Batch:
        out = super().forward(batch, state, **kwargs)
        out.act = out.act + int(self.action_space.start)
        return out


class WarmUpInEnvUnitsDQN(DQNPolicy):
    """Stores random warm-up actions as the env got them (start + index), not as indices."""

    def map_action_inverse(self, act: np.ndarray) -> np.ndarray:
        return act
