"""PPO: policy gradient with a clipped importance ratio, several epochs per rollout.

Per minibatch, with ``ratio = pi(a|s) / pi_old(a|s)`` and advantages ``A`` (GAE)::

    L_clip  = -mean(min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A))
              (dual clip: for A < 0 the per-sample loss is at most -dual_clip * A)
    L_value = mean((V(s) - R)^2)   or, with value_clip, the max of that and the clipped-value error
    loss    = L_clip + vf_coef * L_value - ent_coef * mean(entropy)

An update stops early when the approximate KL ``mean((ratio - 1) - log ratio)`` exceeds
``1.5 * target_kl``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import OnPolicyPolicy, value_loss
from rlblocks.contracts import Batch
from rlblocks_algo_ppo.config import PPOConfig


class PPOPolicy(OnPolicyPolicy):
    """PPO for Discrete, MultiDiscrete and Box actions (see :class:`PPOConfig`)."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: PPOConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(observation_space, action_space, config or PPOConfig(), device, **nets)
        self.config: PPOConfig
        self.optim_step = self.add_optimizer("policy", self.make_optimizer_step(self, eps=1e-5))

    def learn(
        self, batch: Batch, batch_size: int = 64, repeat: int = 10, **kwargs: Any
    ) -> dict[str, float]:
        c = self.config
        data = self.rollout(batch)
        eps = c.clip_ratio
        sums = torch.zeros(5, device=self.device)  # loss, clip loss, value loss, entropy, approx kl
        n_mb = 0
        stopped = False
        for r in range(repeat):
            if r > 0 and c.recompute_advantage:
                self.compute_advantages(data)
            for mb in self.minibatches(data, batch_size):
                feats = self.features(mb["obs"])
                dist = self.dist(feats, mb.get("mask"))
                logp = dist.log_prob(mb["act"])
                log_ratio = logp - mb["logp_old"]
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - log_ratio).mean()
                if c.target_kl is not None and approx_kl > 1.5 * c.target_kl:
                    stopped = True
                    break
                adv = self.normalized(mb["adv"]) if c.norm_adv else mb["adv"]
                surr = torch.min(ratio * adv, ratio.clamp(1.0 - eps, 1.0 + eps) * adv)
                if c.dual_clip is not None:
                    surr = torch.where(adv < 0, torch.max(surr, c.dual_clip * adv), surr)
                clip_loss = -surr.mean()
                value = self.critic_value(mb, feats)
                ret = mb["returns"]
                vf_loss = value_loss(value, ret, mb["value_old"] if c.value_clip else None, eps)
                entropy = dist.entropy().mean()
                loss = clip_loss + c.vf_coef * vf_loss - c.ent_coef * entropy
                self.optim_step.step(loss)
                self.gradient_steps += 1
                with torch.no_grad():
                    sums += torch.stack([loss, clip_loss, vf_loss, entropy, approx_kl]).float()
                n_mb += 1
            if stopped:
                break
        means = (sums / max(n_mb, 1)).tolist()
        return {
            "loss": means[0],
            "loss/clip": means[1],
            "loss/vf": means[2],
            "entropy": means[3],
            "approx_kl": means[4],
            "early_stop": float(stopped),
            "gradient_steps": n_mb,
        }
