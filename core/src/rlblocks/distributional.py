"""The math of distributional Q-learning, shared by C51, Rainbow, QR-DQN, IQN and FQF.

Return distributions are bootstrapped through core's n-step pieces
(:func:`rlblocks.returns.nstep_return`): a sampled transition's target distribution is the
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
    can take ``(target.mean(1) - pred.mean(1)).abs()`` as the TD error."""
    u = target.unsqueeze(1) - pred.unsqueeze(2)  # [B, N, M]
    if kappa > 0:
        abs_u = u.abs()
        huber = torch.where(abs_u <= kappa, 0.5 * u.pow(2), kappa * (abs_u - 0.5 * kappa))
        huber = huber / kappa
    else:
        huber = u.abs()
    if taus.dim() == 1:
        taus = taus.unsqueeze(0)
    weight = (taus.unsqueeze(2) - (u.detach() < 0).to(u.dtype)).abs()  # [B, N, M]
    loss = weight * huber
    if target_weights is None:
        return loss.mean(dim=2).sum(dim=1)
    return (loss * target_weights.unsqueeze(1)).sum(dim=(1, 2))


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
