"""A2C: one policy-gradient step with a learned baseline per minibatch of a fresh rollout::

    loss = -mean(log pi(a|s) * A) + vf_coef * mean((V(s) - R)^2) - ent_coef * mean(entropy)

with ``A`` the GAE advantages and ``R = A + V_old`` the value targets. With ``tanh_mean`` the
Gaussian policy's mean (Box actions) is ``tanh`` of the actor's output.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import DiagGaussian, Distribution, OnPolicyPolicy
from rlblocks.contracts import Batch
from rlblocks_algo_a2c.config import A2CConfig


class A2CPolicy(OnPolicyPolicy):
    """Advantage actor-critic for Discrete, MultiDiscrete and Box actions (:class:`A2CConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: A2CConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(observation_space, action_space, config or A2CConfig(), device, **nets)
        self.config: A2CConfig
        rmsprop = {"alpha": 0.99, "eps": 1e-5} if self.config.optimizer == "rmsprop" else {}
        self.optim_step = self.add_optimizer(
            "policy", self.make_optimizer_step(self, self.config.optimizer, **rmsprop)
        )

    def dist(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> Distribution:
        """The action distribution; a Gaussian's mean squashed into [-1, 1] with ``tanh_mean``."""
        dist = super().dist(features, mask)
        if self.config.tanh_mean and isinstance(dist, DiagGaussian):
            return DiagGaussian(torch.tanh(dist.mean), dist.log_std)
        return dist

    def learn(
        self, batch: Batch, batch_size: int = 0, repeat: int = 1, **kwargs: Any
    ) -> dict[str, float]:
        c = self.config
        data = self.rollout(batch)
        sums = torch.zeros(4, device=self.device)
        n_mb = 0
        for r in range(repeat):
            if r > 0 and c.recompute_advantage:
                self.compute_advantages(data)
            for mb in self.minibatches(data, batch_size):
                feats = self.features(mb["obs"])
                dist = self.dist(feats, mb.get("mask"))
                adv = self.normalized(mb["adv"]) if c.norm_adv else mb["adv"]
                pg_loss = -(dist.log_prob(mb["act"]) * adv).mean()
                vf_loss = (self.critic(feats) - mb["returns"]).pow(2).mean()  # type: ignore[misc]
                entropy = dist.entropy().mean()
                loss = pg_loss + c.vf_coef * vf_loss - c.ent_coef * entropy
                self.optim_step.step(loss)
                self.gradient_steps += 1
                with torch.no_grad():
                    sums += torch.stack([loss, pg_loss, vf_loss, entropy]).float()
                n_mb += 1
        means = (sums / max(n_mb, 1)).tolist()
        return {
            "loss": means[0],
            "loss/actor": means[1],
            "loss/vf": means[2],
            "entropy": means[3],
            "gradient_steps": n_mb,
        }
