"""Q-function ensembles for off-policy algorithms: ``n`` independent critics evaluated in one
batched pass (TD3 and SAC's twin critics are ``n=2``, REDQ's ensemble ``n=10``).

Members share nothing but the layout of their weights: each layer is one
:class:`EnsembleLinear` holding ``[n, in, out]`` weights, so ``n`` critics cost one batched
matrix product per layer instead of ``n`` small ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rlblocks.algo.nets._mlp import activation_class

__all__ = ["EnsembleLinear", "EnsembleMLP", "ModuleEnsemble", "QEnsemble"]


class EnsembleLinear(nn.Module):
    """``n`` independent linear layers: ``x [n, B, in] -> [n, B, out]``; each member is
    initialised as ``nn.Linear`` would be."""

    def __init__(self, n: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(n, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ensemble_affine(x, self.weight, self.bias)

    def member(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """Member ``i`` alone: ``x [1, B, in] -> [1, B, out]``, the same kernel on a one-member
        slice (so its numbers match member ``i`` of :meth:`forward`)."""
        return _ensemble_affine(x, self.weight[i : i + 1], self.bias[i : i + 1])


def _ensemble_affine(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ weight + bias`` per member. A critic's scalar output layer (``out == 1``) on the
    CPU is a multiply and a row sum instead: ``baddbmm`` takes a slow matrix-vector path there,
    about 4x slower forward and 2x forward+backward at ``[2, 256, 256] x [2, 256, 1]`` with
    one thread (torch 2.13), some 4% of a SAC gradient step. Other shapes, and CUDA, keep the
    batched GEMM."""
    if weight.shape[-1] == 1 and x.device.type == "cpu":
        return (x * weight.transpose(1, 2)).sum(dim=-1, keepdim=True) + bias
    return torch.baddbmm(bias, x, weight)


class EnsembleMLP(nn.Module):
    """``n`` MLPs ``in -> hidden... -> out`` evaluated together. Input ``[B, in]`` (the same for
    every member) or ``[n, B, in]``; output ``[n, B, out]``."""

    def __init__(
        self, n: int, in_dim: int, hidden: Sequence[int], out_dim: int, activation: str = "relu"
    ) -> None:
        super().__init__()
        self.n = n
        act = activation_class(activation)
        layers: list[nn.Module] = []
        last = in_dim
        for width in hidden:
            layers += [EnsembleLinear(n, last, width), act()]
            last = width
        layers.append(EnsembleLinear(n, last, out_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, member: int | None = None) -> torch.Tensor:
        """All members (``[n, B, out]``) or, with ``member``, that one alone (``[1, B, out]``)
        at ``1/n`` of the cost: e.g. TD3's actor loss, which reads the first critic only."""
        if member is not None:
            if not -self.n <= member < self.n:
                raise IndexError(f"member {member} of an ensemble of {self.n}")
            member %= self.n  # a negative index counts from the end, as in forward()[member]
            x = x.unsqueeze(0) if x.dim() == 2 else x[member : member + 1]
            for layer in self.net:
                x = layer.member(x, member) if isinstance(layer, EnsembleLinear) else layer(x)
            return x
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.n, *x.shape)
        return self.net(x)


class ModuleEnsemble(nn.Module):
    """Separate modules (your own critic heads) with :class:`EnsembleMLP`'s interface: input
    ``[B, in]``, output ``[n, B, out]``, ``member`` for one of them alone. Members run one
    after another; one that returns ``[B]`` counts as ``[B, 1]``."""

    def __init__(self, members: Sequence[nn.Module]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.n = len(self.members)

    def forward(self, x: torch.Tensor, member: int | None = None) -> torch.Tensor:
        if member is not None:
            return _column(self.members[member](x)).unsqueeze(0)
        return torch.stack([_column(m(x)) for m in self.members])


def _column(out: torch.Tensor) -> torch.Tensor:
    return out.unsqueeze(-1) if out.dim() == 1 else out


class QEnsemble(nn.Module):
    """``n`` critics over an encoder's features.

    With ``act_dim`` (continuous actions) ``forward(obs, act)`` returns ``Q(s, a)`` as ``[n, B]``;
    with ``num_actions`` (discrete actions) ``forward(obs)`` returns ``Q(s, .)`` as
    ``[n, B, num_actions]``. The encoder (one for all members) is trained by the critic loss
    when it has parameters. ``heads`` replace the members' MLPs by your own modules, ``n`` of
    them, each from ``[B, features (+ act_dim)]`` to ``[B, 1]`` (or ``[B, num_actions]``).
    """

    def __init__(
        self,
        encoder: nn.Module,
        *,
        act_dim: int | None = None,
        num_actions: int | None = None,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        n: int = 2,
        heads: Sequence[nn.Module] | None = None,
    ) -> None:
        super().__init__()
        if (act_dim is None) == (num_actions is None):
            raise ValueError("QEnsemble takes exactly one of act_dim and num_actions")
        if n < 1:
            raise ValueError(f"a critic ensemble needs n >= 1 members, got {n}")
        self.encoder = encoder
        self.n = n
        self.continuous = act_dim is not None
        in_dim = int(encoder.out_dim) + (act_dim or 0)
        self.net: nn.Module
        if heads is not None:
            if len(heads) != n:
                raise ValueError(f"a critic ensemble of {n} needs {n} heads, got {len(heads)}")
            self.net = ModuleEnsemble(heads)
        else:
            self.net = EnsembleMLP(n, in_dim, hidden, num_actions or 1, activation)

    def forward(
        self, obs: Any, act: torch.Tensor | None = None, *, member: int | None = None
    ) -> torch.Tensor:
        """``Q`` of every member; with ``member``, of that member alone (leading dim 1)."""
        features = self.encoder(obs)
        if not self.continuous:
            return self.net(features, member)
        if act is None:
            raise TypeError("a continuous-action QEnsemble needs act")
        return self.net(torch.cat([features, act], dim=-1), member).squeeze(-1)
