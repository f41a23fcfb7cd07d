"""TRPO: NPG's natural direction ``x = F^-1 g``, scaled to the trust region's edge and accepted
only if it keeps the KL bound and improves the surrogate::

    beta = sqrt(2 * max_kl / (x^T F x))
    for k in 0 .. max_backtracks - 1:
        theta = theta_old - backtrack_coeff^k * beta * x     (x points up the loss)
        accept if mean KL(pi_old || pi_theta) <= max_kl and L(theta) < L(theta_old)
    otherwise keep theta_old
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlblocks.algo import Distribution, Rollout, get_flat_params, set_flat_params
from rlblocks_algo_npg.npg import NPGPolicy
from rlblocks_algo_trpo.config import TRPOConfig


class TRPOPolicy(NPGPolicy):
    """TRPO for Discrete, MultiDiscrete and Box actions (see :class:`TRPOConfig`)."""

    config: TRPOConfig

    def __init__(self, *args, config: TRPOConfig | None = None, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, config=config or TRPOConfig(), **kwargs)

    @torch.no_grad()
    def _evaluate(
        self, mb: Rollout, adv: torch.Tensor, old_dist: Distribution
    ) -> tuple[float, float]:
        loss, dist = self.surrogate(mb, adv)
        return float(loss), float(old_dist.kl(dist).mean())

    def actor_step(
        self,
        direction: torch.Tensor,
        fvp: Callable[[torch.Tensor], torch.Tensor],
        mb: Rollout,
        adv: torch.Tensor,
        old_dist: Distribution,
        old_loss: torch.Tensor,
    ) -> dict[str, float]:
        c = self.config
        shs = float(direction.dot(fvp(direction)))
        beta = (2.0 * c.max_kl / max(shs, 1e-12)) ** 0.5
        flat = get_flat_params(self._actor_params)
        for k in range(c.max_backtracks):
            frac = c.backtrack_coeff**k
            set_flat_params(self._actor_params, flat - frac * beta * direction)
            loss, kl = self._evaluate(mb, adv, old_dist)
            if kl <= c.max_kl and loss < float(old_loss):
                return {"step_fraction": frac, "accepted": 1.0}
        set_flat_params(self._actor_params, flat)
        return {"step_fraction": 0.0, "accepted": 0.0}
