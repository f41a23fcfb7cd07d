"""REINFORCE: ascend ``mean(log pi(a_t|s_t) * G_t)`` with ``G_t`` the discounted reward-to-go
(standardised when ``norm_adv``), minus ``ent_coef`` times the entropy.

There is no critic, so nothing is bootstrapped: collect whole episodes (the default
``trainer.episode_per_collect``); pieces cut by a time limit count their unseen future as zero.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import OnPolicyPolicy
from rlblocks.contracts import Batch
from rlblocks_algo_reinforce.config import ReinforceConfig


class ReinforcePolicy(OnPolicyPolicy):
    """Vanilla policy gradient for Discrete, MultiDiscrete and Box actions."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: ReinforceConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(
            observation_space,
            action_space,
            config or ReinforceConfig(),
            device,
            use_critic=False,
            **nets,
        )
        self.config: ReinforceConfig
        self.optim_step = self.add_optimizer("policy", self.make_optimizer_step(self))

    def learn(
        self, batch: Batch, batch_size: int = 0, repeat: int = 1, **kwargs: Any
    ) -> dict[str, float]:
        c = self.config
        data = self.rollout(batch)
        sums = torch.zeros(3, device=self.device)
        n_mb = 0
        for _ in range(repeat):
            for mb in self.minibatches(data, batch_size):
                dist = self.dist(self.features(mb["obs"]), mb.get("mask"))
                ret = self.normalized(mb["adv"]) if c.norm_adv else mb["adv"]
                pg_loss = -(dist.log_prob(mb["act"]) * ret).mean()
                entropy = dist.entropy().mean()
                loss = pg_loss - c.ent_coef * entropy
                self.optim_step.step(loss)
                self.gradient_steps += 1
                with torch.no_grad():
                    sums += torch.stack([loss, pg_loss, entropy]).float()
                n_mb += 1
        means = (sums / max(n_mb, 1)).tolist()
        return {
            "loss": means[0], "loss/actor": means[1], "entropy": means[2], "gradient_steps": n_mb
        }
