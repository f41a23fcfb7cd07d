"""The math of distributional Q-learning, shared by C51, Rainbow, QR-DQN, IQN and FQF.

Return distributions are bootstrapped through core's n-step pieces
(:func:`rlblocks.algo.nstep_return`): a sampled transition's target distribution is the
bootstrap distribution ``Z(s', a*)`` shifted and scaled, ``partial + discount * Z``, with
``discount = gamma^m`` (0 when the episode terminated within the ``m <= n_step`` steps).

* :func:`categorical_projection` — C51 (Bellemare et al. 2017): the shifted atoms fall between
  the fixed support's atoms; each one's probability is split between its two neighbours.
* :func:`quantile_huber_loss` — QR-DQN (Dabney et al. 2018a), IQN and FQF: the asymmetric Huber
  loss between every predicted quantile and every target sample.
* :func:`cosine_features` — IQN's embedding of quantile fractions, ``cos(pi * i * tau)``.
* :func:`fraction_loss` — FQF's gradient for its fraction proposals (Yang et al. 2019).
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = [
    "categorical_projection",
    "cosine_features",
    "fraction_loss",
    "quantile_huber_loss",
    "quantile_midpoints",
]


def categorical_projection(
    probs: torch.Tensor, partial: torch.Tensor, discount: torch.Tensor, support: torch.Tensor
) -> torch.Tensor:
    """Project ``partial + discount * support`` with probabilities ``probs [B, N]`` back onto
    ``support [N]`` (evenly spaced, ascending); returns ``[B, N]`` probabilities.

    Each shifted atom is clamped into ``[v_min, v_max]`` and its probability split between the
    two support atoms around it in proportion to closeness (all of it to one atom when it lands
    exactly on one). ``partial`` and ``discount`` are ``[B]``."""
    n = support.shape[0]
    v_min, v_max = float(support[0]), float(support[-1])
    delta = (v_max - v_min) / (n - 1)
    tz = (partial.unsqueeze(1) + discount.unsqueeze(1) * support.unsqueeze(0)).clamp(v_min, v_max)
    b = (tz - v_min) / delta  # position in atom units, [B, N]
    lower = b.floor().clamp(0, n - 1)
    upper = b.ceil().clamp(0, n - 1)
    # an atom that lands exactly on a support atom (lower == upper) gives it everything
    w_upper = b - lower
    w_lower = 1.0 - w_upper
    out = torch.zeros_like(probs)
    out.scatter_add_(1, lower.long(), probs * w_lower)
    out.scatter_add_(1, upper.long(), probs * w_upper)
    return out


def quantile_midpoints(n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """QR-DQN's fixed fractions ``(2i + 1) / 2n`` for ``i < n`` (``[n]``)."""
    return (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n


def quantile_huber_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    taus: torch.Tensor,
    kappa: float = 1.0,
    target_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Quantile regression loss of ``pred [B, N]`` (values at fractions ``taus``, ``[N]`` or
    ``[B, N]``) against target samples ``target [B, M]``; returns ``[B]``: the sum over the
    predicted quantiles of the mean over target samples of
    ``|tau - 1{u < 0}| * huber_kappa(u) / kappa`` with ``u = target - pred`` (``kappa = 0``:
    the plain quantile loss). ``target_weights [B, M]`` (rows summing to 1) weigh the target
    samples instead of ``1 / M`` each: FQF's target is a staircase with steps of unequal width,
    and equal weights would pull it towards where the fractions bunch. A prioritized sampler
    can take ``(target.mean(1) - pred.mean(1)).abs()`` as the TD error.

    When only ``pred`` needs a gradient (the usual case: targets, fractions and weights are
    fixed), the loss is one autograd node with its gradient in closed form,
    ``d loss / d pred_i = -sum_m w_m |tau_i - 1{u < 0}| clamp(u, -kappa, kappa) / kappa``,
    instead of a graph of some twenty elementwise nodes over ``[B, N, M]``: the same values
    in a fraction of the time, which matters when the network is small."""
    if taus.dim() == 1:
        taus = taus.unsqueeze(0)
    fixed = not (
        target.requires_grad
        or taus.requires_grad
        or (target_weights is not None and target_weights.requires_grad)
    )
    if fixed and torch.is_grad_enabled() and pred.requires_grad:
        return _QuantileHuber.apply(pred, target, taus, float(kappa), target_weights)
    # the plain graph, which autograd can differentiate in every input
    u = target.unsqueeze(1) - pred.unsqueeze(2)  # [B, N, M]
    # |tau - 1{u < 0}|: 1 - tau below the prediction, tau above
    weight = torch.where(u.detach() < 0, 1.0 - taus.unsqueeze(2), taus.unsqueeze(2))
    if kappa > 0:
        # huber_kappa(u) = c * (u - c / 2) with c = clamp(u, -kappa, kappa), whose derivative in
        # u is c: 0.5 u^2 inside [-kappa, kappa], kappa (|u| - kappa / 2) outside
        c = u.clamp(-kappa, kappa)
        terms = weight * c * (u - 0.5 * c) / kappa
    else:
        terms = weight * u.abs()
    if target_weights is None:
        return terms.mean(dim=2).sum(dim=1)
    return (terms * target_weights.unsqueeze(1)).sum(dim=(1, 2))


class _QuantileHuber(torch.autograd.Function):
    """:func:`quantile_huber_loss` as one node, its gradient in ``pred`` computed with the
    loss (``u = target - pred``, so ``d loss / d pred = -d loss / d u``), in place where it
    can: on small batches each elementwise pass costs more to launch than to run."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        pred: torch.Tensor,
        target: torch.Tensor,
        taus: torch.Tensor,
        kappa: float,
        target_weights: torch.Tensor | None,
    ) -> torch.Tensor:
        u = target.unsqueeze(1) - pred.unsqueeze(2)  # [B, N, M]
        taus = taus.unsqueeze(2)
        # |tau - 1{u < 0}| * slope of the Huber loss (see quantile_huber_loss)
        if kappa > 0:
            c = u.clamp(-kappa, kappa)
            slope = torch.where(u < 0, 1.0 - taus, taus).mul_(c)
            terms = u.sub_(c, alpha=0.5).mul_(slope)  # u is not needed after this
            if kappa != 1.0:
                terms.div_(kappa)
                slope.div_(kappa)
        else:
            weight = torch.where(u < 0, 1.0 - taus, taus)
            slope = u.sign().mul_(weight)
            terms = u.abs_().mul_(weight)
        if target_weights is None:
            loss = terms.mean(dim=2).sum(dim=1)
            grad = slope.mean(dim=2)
        else:
            tw = target_weights.unsqueeze(1)
            loss = terms.mul_(tw).sum(dim=(1, 2))
            grad = slope.mul_(tw).sum(dim=2)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        return grad * grad_loss.neg().unsqueeze(1), None, None, None, None


def cosine_features(taus: torch.Tensor, dim: int = 64) -> torch.Tensor:
    """IQN's embedding basis ``cos(pi * i * tau)`` for ``i = 0 .. dim-1``: ``[..., dim]``."""
    i = torch.arange(dim, device=taus.device, dtype=taus.dtype)
    return torch.cos(math.pi * i * taus.unsqueeze(-1))


def fraction_loss(
    values_at_taus: torch.Tensor, values_at_hats: torch.Tensor, taus: torch.Tensor
) -> torch.Tensor:
    """FQF's fraction-proposal loss, ``[B]``: its gradient with respect to the inner fractions
    ``tau_1 .. tau_{N-1}`` is ``2 F^-1(tau_i) - F^-1(tau_hat_i) - F^-1(tau_hat_{i-1})`` (the
    derivative of the 1-Wasserstein error of the staircase approximation).

    ``values_at_taus [B, N-1]``: the quantile values at the inner fractions (no gradient);
    ``values_at_hats [B, N]``: at the midpoints (no gradient); ``taus [B, N+1]``: the fractions
    with ``tau_0 = 0`` and ``tau_N = 1``, which carry the gradient to the proposal network."""
    grad = (
        2 * values_at_taus - values_at_hats[:, :-1] - values_at_hats[:, 1:]
    ).detach()  # [B, N-1]
    return (grad * taus[:, 1:-1]).sum(dim=1)
