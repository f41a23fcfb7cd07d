"""Rainbow: C51's policy with every ingredient on by default — the composition lives in the
config (noisy, dueling, double, n_step) and in the buffer section (the prioritized sampler),
not in new learning code. The one addition is the ablation switch ``distributional=False``:
one output per action learned towards the expected n-step target with a Huber loss.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F

from rlblocks.contracts import Batch
from rlblocks_algo_c51.c51 import C51Policy
from rlblocks_algo_rainbow.config import RainbowConfig


class RainbowPolicy(C51Policy):
    """C51 with Rainbow's defaults; ``distributional=False`` learns expected values."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: RainbowConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(observation_space, action_space, config or RainbowConfig(), device, **nets)

    @staticmethod
    def outputs_per_action(config: Any) -> int:
        """The atoms' logits, or one number (the expected value) without ``distributional``."""
        return int(config.num_atoms) if config.distributional else 1

    def q_values(self, obs: Any, net: torch.nn.Module) -> torch.Tensor:
        if self.config.distributional:
            return super().q_values(obs, net)
        return net(obs)[..., 0]

    def learn(self, batch: Batch, **kwargs: Any) -> dict[str, Any]:
        if self.config.distributional:
            return super().learn(batch, **kwargs)
        obs_boot = self.obs_tensor(batch.obs_boot)
        best = self.bootstrap_actions(obs_boot)
        with torch.no_grad():
            boot = self.q_values(obs_boot, self.target_model).gather(1, best.view(-1, 1))
            target = batch.partial + batch.discount * boot.squeeze(1)
        act = self.actions_tensor(batch)
        q_taken = self.q_values(self.obs_tensor(batch.obs), self.model).gather(
            1, act.view(-1, 1)
        ).squeeze(1)
        per_sample = F.smooth_l1_loss(q_taken, target, reduction="none")
        weight = self.weights(batch)
        loss = (per_sample * weight).mean() if weight is not None else per_sample.mean()
        self.finish_step(loss)
        batch.td_error = (q_taken - target).detach().abs()
        return {"loss": loss.detach(), "q": q_taken.detach().mean()}
