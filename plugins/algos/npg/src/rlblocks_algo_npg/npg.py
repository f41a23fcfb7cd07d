"""NPG: move the actor along the natural gradient, the critic by regression on GAE targets.

Per minibatch, with the surrogate ``L(theta) = mean(pi_theta(a|s) / pi_old(a|s) * A)``::

    g = grad L                        (at theta_old)
    x = F^-1 g                        (conjugate gradient on Fisher-vector products)
    theta <- theta_old + actor_step_size * x

then ``critic_iters`` Adam steps on ``mean((V(s) - R)^2)``. TRPO (``rlblocks-algo-trpo``) replaces
the fixed step by the largest step within a KL bound, found by line search (:meth:`actor_step`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from rlblocks.algo import (
    Distribution,
    OnPolicyPolicy,
    Rollout,
    conjugate_gradient,
    fisher_vector_product,
    flat_grad,
    get_flat_params,
    set_flat_params,
)
from rlblocks.contracts import Batch
from rlblocks_algo_npg.config import NPGConfig


class NPGPolicy(OnPolicyPolicy):
    """Natural policy gradient for Discrete, MultiDiscrete and Box actions."""

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        config: NPGConfig | None = None,
        device: str | torch.device = "cpu",
        **nets: Any,
    ) -> None:
        super().__init__(observation_space, action_space, config or NPGConfig(), device, **nets)
        self.config: NPGConfig
        if self.learn_encoder:
            raise TypeError(
                "NPG/TRPO need a fixed encoder (the natural gradient covers the actor only); for "
                "image observations set algo.images=flatten or pass a frozen encoder"
            )
        self._actor_params = [p for p in self.actor.parameters() if p.requires_grad]
        self._critic_params = [p for p in self.critic.parameters() if p.requires_grad]  # type: ignore[union-attr]
        self.critic_optim = self.add_optimizer(
            "critic", self.make_optimizer_step(self._critic_params)
        )

    def surrogate(self, mb: Rollout, adv: torch.Tensor) -> tuple[torch.Tensor, Distribution]:
        """``(-L(theta), distribution)`` on a minibatch (a loss: lower is better)."""
        dist = self.dist(mb["obs"], mb.get("mask"))
        ratio = (dist.log_prob(mb["act"]) - mb["logp_old"]).exp()
        return -(ratio * adv).mean(), dist

    def actor_step(
        self,
        direction: torch.Tensor,
        fvp: Callable[[torch.Tensor], torch.Tensor],
        mb: Rollout,
        adv: torch.Tensor,
        old_dist: Distribution,
        old_loss: torch.Tensor,
    ) -> dict[str, float]:
        """Apply the step along the natural direction ``direction = F^-1 g`` (NPG: fixed size)."""
        flat = get_flat_params(self._actor_params)
        set_flat_params(self._actor_params, flat - self.config.actor_step_size * direction)
        return {}

    def learn(
        self, batch: Batch, batch_size: int = 0, repeat: int = 1, **kwargs: Any
    ) -> dict[str, float]:
        c = self.config
        data = self.rollout(batch)
        stats: dict[str, list[float]] = {}
        n_steps = 0
        for r in range(repeat):
            if r > 0 and c.recompute_advantage:
                self.compute_advantages(data)
            for mb in self.minibatches(data, batch_size):
                adv = self.normalized(mb["adv"]) if c.norm_adv else mb["adv"]
                loss, dist = self.surrogate(mb, adv)
                g = flat_grad(loss, self._actor_params, retain_graph=True)
                old_dist = dist.detach()  # type: ignore[attr-defined]
                kl = old_dist.kl(self.dist(mb["obs"], mb.get("mask"))).mean()
                fvp = fisher_vector_product(kl, self._actor_params, c.damping)
                direction = conjugate_gradient(fvp, g, c.cg_iters)
                extra = self.actor_step(direction, fvp, mb, adv, old_dist, loss.detach())
                for _ in range(c.critic_iters):
                    vf_loss = (self.critic(mb["obs"]) - mb["returns"]).pow(2).mean()  # type: ignore[misc]
                    self.critic_optim.step(vf_loss)
                    self.gradient_steps += 1
                    n_steps += 1
                with torch.no_grad():
                    new_kl = float(old_dist.kl(self.dist(mb["obs"], mb.get("mask"))).mean())
                for key, value in {
                    "loss/actor": float(loss.detach()),
                    "loss/vf": float(vf_loss.detach()),
                    "kl": new_kl,
                    **extra,
                }.items():
                    stats.setdefault(key, []).append(value)
        out = {k: sum(v) / len(v) for k, v in stats.items()}
        out["gradient_steps"] = n_steps
        return out
