"""Noisy linear layers (Fortunato et al. 2018, "Noisy Networks for Exploration"): the weights
carry learned per-weight noise scales, so exploration is learned with the values instead of an
epsilon schedule.

Factorised Gaussian noise: one noise vector for the inputs and one for the outputs,
``eps_w = f(eps_out) f(eps_in)^T`` and ``eps_b = f(eps_out)`` with ``f(x) = sign(x) sqrt(|x|)``,
so a layer draws ``in + out`` normals per resample instead of ``in * out``. Initialisation as in
the paper: ``mu ~ U(-1/sqrt(in), 1/sqrt(in))`` and ``sigma = sigma0 / sqrt(in)``.

In training mode a layer computes with ``mu + sigma * eps`` (the noise drawn at the last
:meth:`NoisyLinear.reset_noise`); in eval mode with ``mu`` alone (greedy tests, and target
networks, which stay in eval mode). Noise comes from torch's global generator, which runs
seed and checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo.nets._mlp import activation_class

__all__ = ["NoisyLinear", "noisy_mlp", "reset_noise"]


class NoisyLinear(nn.Module):
    """``y = (mu_w + sigma_w * eps_w) x + mu_b + sigma_b * eps_b`` with factorised noise."""

    def __init__(self, in_features: int, out_features: int, sigma0: float = 0.5) -> None:
        super().__init__()
        if sigma0 < 0:
            raise ValueError(f"sigma0 must be >= 0, got {sigma0}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight_mu = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_sigma = nn.Parameter(torch.empty(out_features, in_features))
        self.bias_mu = nn.Parameter(torch.empty(out_features))
        self.bias_sigma = nn.Parameter(torch.empty(out_features))
        # the current noise: buffers, so .to(device) moves them and checkpoints keep them
        self.register_buffer("eps_in", torch.zeros(in_features))
        self.register_buffer("eps_out", torch.zeros(out_features))
        # eps_out x eps_in, kept between noise draws (each training forward reads it; a
        # gradient step runs three of them): not saved, rebuilt from the two factors on load
        self.register_buffer("eps_weight", torch.zeros(out_features, in_features), persistent=False)
        bound = 1.0 / math.sqrt(in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.bias_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(sigma0 * bound)
            self.bias_sigma.fill_(sigma0 * bound)
        self.reset_noise()

    @staticmethod
    def _scaled(n: int, like: torch.Tensor) -> torch.Tensor:
        x = torch.randn(n, device=like.device, dtype=like.dtype)
        return x.sign() * x.abs().sqrt()

    @torch.no_grad()
    def reset_noise(self) -> None:
        """Draw new noise (used by training-mode forwards until the next call)."""
        self.eps_in.copy_(self._scaled(self.in_features, self.eps_in))
        self.eps_out.copy_(self._scaled(self.out_features, self.eps_out))
        torch.outer(self.eps_out, self.eps_in, out=self.eps_weight)

    def _load_from_state_dict(self, state_dict: Any, prefix: str, *args: Any) -> None:
        super()._load_from_state_dict(state_dict, prefix, *args)
        with torch.no_grad():
            torch.outer(self.eps_out, self.eps_in, out=self.eps_weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.linear(x, self.weight_mu, self.bias_mu)
        weight = torch.addcmul(self.weight_mu, self.weight_sigma, self.eps_weight)
        bias = torch.addcmul(self.bias_mu, self.bias_sigma, self.eps_out)
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


def noisy_mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int | None = None,
    activation: str = "relu",
    noisy: bool = True,
    sigma0: float = 0.5,
) -> nn.Sequential:
    """An MLP whose linear layers are :class:`NoisyLinear` (plain ``nn.Linear`` with
    ``noisy=False``); ``.out_dim`` is its output width."""
    act = activation_class(activation)
    layers: list[nn.Module] = []
    last = in_dim
    widths = [*hidden, *([out_dim] if out_dim is not None else [])]
    for k, width in enumerate(widths):
        layers.append(NoisyLinear(last, width, sigma0) if noisy else nn.Linear(last, width))
        if k < len(hidden):
            layers.append(act())
        last = width
    seq = nn.Sequential(*layers)
    seq.out_dim = last  # type: ignore[attr-defined]
    return seq


@torch.no_grad()
def reset_noise(module: nn.Module) -> None:
    """Draw new noise in every :class:`NoisyLinear` inside ``module``: one draw of normals for
    all of them (a gradient step resamples every layer, and small layers cost their launches,
    not their arithmetic)."""
    layers = [m for m in module.modules() if isinstance(m, NoisyLinear)]
    if not layers:
        return
    first = layers[0].eps_in
    x = torch.randn(sum(m.in_features + m.out_features for m in layers), device=first.device,
                    dtype=first.dtype)  # fmt: skip
    f = x.sign() * x.abs().sqrt()
    at = 0
    for m in layers:
        m.eps_in.copy_(f[at : at + m.in_features])
        at += m.in_features
        m.eps_out.copy_(f[at : at + m.out_features])
        at += m.out_features
        torch.outer(m.eps_out, m.eps_in, out=m.eps_weight)
