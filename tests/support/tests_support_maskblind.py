"""Deliberately mask-blind algorithms for the conformance kit's own tests: they declare
action_masks in their specs and ignore the masks."""

from __future__ import annotations

from typing import Any

from rlblocks_algo_dqn.dqn import DQNPolicy
from rlblocks_algo_ppo.ppo import PPOPolicy


class MaskBlindDQN(DQNPolicy):
    """DQN that never reads the mask: greedy and epsilon-random actions over every action."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._masked = False


class MaskBlindPPO(PPOPolicy):
    """PPO that samples from the unmasked distribution."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.masked = False
