"""Batch Renormalization (Ioffe, 2017, "Batch Renormalization: Towards Reducing Minibatch
Dependence in Batch-Normalized Models"), the normalisation CrossQ puts in its networks.

In training mode a batch ``x [B, F]`` with mean ``mu_B`` and ``sigma_B = sqrt(var_B + eps)`` is
normalised as batch norm does, then corrected towards the running statistics ``mu, sigma``::

    r = clip(sigma_B / sigma, 1 / r_max, r_max)          (constants: no gradient flows through)
    d = clip((mu_B - mu) / sigma, -d_max, d_max)
    y = gamma * ((x - mu_B) / sigma_B * r + d) + beta

so the output matches what the running statistics give at test time up to the clipping; the
running statistics then move ``1 - momentum`` of the way to the batch's. For the first
``warmup_steps`` training passes ``r = 1`` and ``d = 0`` (plain batch norm) while the running
statistics settle, as CrossQ's reference implementation does. In evaluation mode
``y = gamma * (x - mu) / sigma + beta``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["BatchRenorm1d"]


class BatchRenorm1d(nn.Module):
    """Batch Renormalization over the last dimension of ``[B, F]`` inputs.

    Args:
        num_features: ``F``.
        momentum: the fraction of the running statistics kept at each training pass (0.99 in
            the CrossQ paper; note this is ``1 - `` torch's ``BatchNorm1d`` momentum).
        eps: added to variances before the square root.
        r_max: bound of the scale correction ``r`` to ``[1 / r_max, r_max]``.
        d_max: bound of the shift correction ``d`` to ``[-d_max, d_max]``.
        warmup_steps: training passes of plain batch norm before ``r`` and ``d`` apply.
    """

    running_mean: torch.Tensor
    running_var: torch.Tensor
    steps: torch.Tensor

    def __init__(
        self,
        num_features: int,
        momentum: float = 0.99,
        eps: float = 1e-3,
        r_max: float = 3.0,
        d_max: float = 5.0,
        warmup_steps: int = 100_000,
    ) -> None:
        super().__init__()
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if r_max < 1.0 or d_max < 0.0:
            raise ValueError(f"need r_max >= 1 and d_max >= 0, got {r_max} and {d_max}")
        self.num_features = num_features
        self.momentum, self.eps = float(momentum), float(eps)
        self.r_max, self.d_max = float(r_max), float(d_max)
        self.warmup_steps = int(warmup_steps)
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            x_hat = (x - self.running_mean) * torch.rsqrt(self.running_var + self.eps)
            return x_hat * self.weight + self.bias
        mean = x.mean(dim=0)
        var = x.var(dim=0, unbiased=False)
        std = torch.sqrt(var + self.eps)
        x_hat = (x - mean) / std
        with torch.no_grad():
            running_std = torch.sqrt(self.running_var + self.eps)
            r = (std / running_std).clamp(1.0 / self.r_max, self.r_max)
            d = ((mean - self.running_mean) / running_std).clamp(-self.d_max, self.d_max)
            # plain batch norm until warmed up: r = 1, d = 0 (a tensor test, so no host sync)
            warm = self.steps >= self.warmup_steps
            r = torch.where(warm, r, torch.ones_like(r))
            d = torch.where(warm, d, torch.zeros_like(d))
            self.running_mean.lerp_(mean.detach(), 1.0 - self.momentum)
            self.running_var.lerp_(var.detach(), 1.0 - self.momentum)
            self.steps += 1
        return (x_hat * r + d) * self.weight + self.bias

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, momentum={self.momentum}, eps={self.eps}, r_max={self.r_max}, "
            f"d_max={self.d_max}, warmup_steps={self.warmup_steps}"
        )
