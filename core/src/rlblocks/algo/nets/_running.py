"""Running mean and variance of every sample seen so far: the arithmetic shared by the
on-policy ``obs_norm`` (:class:`RunningMeanStd`, re-exported by :mod:`rlblocks.algo`) and
SimBa's input normalisation (:class:`~rlblocks.algo.nets.RSNorm`). It lives with the networks
because the algorithm layer builds on them, not the other way round."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn


class RunningMeanStd(nn.Module):
    """Mean and variance of every sample seen so far, merged batch by batch (Chan et al.'s
    parallel algorithm, so one big batch and many small ones give the same numbers).

    Args:
        shape: shape of one sample (``()`` for scalars such as returns).
        epsilon: added to the variance before the square root, so constant features do not blow up.
        clip: :meth:`normalize` clips its output to ``[-clip, clip]`` (None: no clipping).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(
        self, shape: Sequence[int] = (), epsilon: float = 1e-8, clip: float | None = 10.0
    ) -> None:
        super().__init__()
        self.epsilon = float(epsilon)
        self.clip = clip
        self.register_buffer("mean", torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer("var", torch.ones(tuple(shape), dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Any) -> None:
        """Merge a batch ``x [N, *shape]`` (tensor or array) into the statistics."""
        x = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
        x = x.to(device=self.mean.device, dtype=torch.float64).reshape(-1, *self.mean.shape)
        n = x.shape[0]
        if n == 0:
            return
        b_mean = x.mean(dim=0)
        b_var = x.var(dim=0, unbiased=False)
        total = self.count + n
        delta = b_mean - self.mean
        m2 = self.var * self.count + b_var * n + delta.pow(2) * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    @property
    def std(self) -> torch.Tensor:
        """``sqrt(var + epsilon)`` (float64)."""
        return torch.sqrt(self.var + self.epsilon)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std``, clipped to ``[-clip, clip]``, in ``x``'s dtype."""
        out = (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)
        if self.clip is not None:
            out = out.clamp(-self.clip, self.clip)
        return out

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize` (without the clipping)."""
        return x * self.std.to(x.dtype) + self.mean.to(x.dtype)

    def extra_repr(self) -> str:
        return f"shape={tuple(self.mean.shape)}, count={int(self.count)}, clip={self.clip}"
