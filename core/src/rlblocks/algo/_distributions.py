"""Action distributions for policy-gradient algorithms: categorical, diagonal Gaussian and a
product of categoricals (MultiDiscrete), each with ``sample``, ``mode``, ``log_prob``,
``entropy`` and ``kl``.

They are small classes over plain tensors rather than ``torch.distributions`` objects: argument
validation and broadcasting checks cost more than the arithmetic on the small batches of an
on-policy minibatch loop. Shapes: a batch of ``B`` distributions; ``log_prob``, ``entropy`` and
``kl`` return ``[B]`` (summed over action dimensions where there are several).
"""

from __future__ import annotations

import math
from typing import Any, Protocol, runtime_checkable

import torch

from rlblocks.algo._masks import mask_logits

__all__ = ["Categorical", "DiagGaussian", "Distribution", "MultiCategorical"]

_LOG_2PI = math.log(2.0 * math.pi)


@runtime_checkable
class Distribution(Protocol):
    """What the on-policy algorithms need from an action distribution (checked once, when a
    user's actor is built, never per step)."""

    def sample(self) -> torch.Tensor: ...
    def mode(self) -> torch.Tensor: ...
    def log_prob(self, act: torch.Tensor) -> torch.Tensor: ...
    def entropy(self) -> torch.Tensor: ...
    def kl(self, other: Distribution) -> torch.Tensor: ...


class Categorical:
    """A categorical over ``A`` actions from unnormalised ``logits [B, A]``; with an action
    ``mask [B, A]`` (nonzero = legal) illegal actions get a large negative finite logit, so
    they are never sampled and entropy and KL stay finite (see :func:`mask_logits`)."""

    def __init__(self, logits: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        if mask is not None:
            logits = mask_logits(logits, mask)
        self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # log-probabilities

    @property
    def probs(self) -> torch.Tensor:
        return self.logits.exp()

    def sample(self) -> torch.Tensor:
        """``[B]`` int64 actions (Gumbel-max: one uniform draw per logit, no multinomial)."""
        u = torch.rand_like(self.logits).clamp_(1e-20, 1.0)
        return (self.logits - torch.log(-torch.log(u))).argmax(dim=-1)

    def mode(self) -> torch.Tensor:
        return self.logits.argmax(dim=-1)

    def log_prob(self, act: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, act.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.probs * self.logits).sum(dim=-1)

    def kl(self, other: Distribution) -> torch.Tensor:
        """``KL(self || other)`` per row."""
        assert isinstance(other, Categorical)
        return (self.probs * (self.logits - other.logits)).sum(dim=-1)

    def detach(self) -> Categorical:
        return Categorical(self.logits.detach())

    def masked(self, mask: torch.Tensor | None) -> Categorical:
        """This distribution restricted to the legal actions of ``mask`` (itself without one)."""
        return self if mask is None else Categorical(self.logits, mask)


class DiagGaussian:
    """A Gaussian with diagonal covariance: ``mean [B, D]``, ``log_std [B, D]`` (or ``[D]``)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor) -> None:
        self.mean = mean
        self.log_std = log_std.expand_as(mean)

    @property
    def std(self) -> torch.Tensor:
        return self.log_std.exp()

    def sample(self) -> torch.Tensor:
        return self.mean + self.std * torch.randn_like(self.mean)

    def mode(self) -> torch.Tensor:
        return self.mean

    def log_prob(self, act: torch.Tensor) -> torch.Tensor:
        z = (act - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(dim=-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + 0.5 * (1.0 + _LOG_2PI)).sum(dim=-1)

    def kl(self, other: Distribution) -> torch.Tensor:
        """``KL(self || other)`` per row, in closed form."""
        assert isinstance(other, DiagGaussian)
        var_ratio = (2.0 * (self.log_std - other.log_std)).exp()
        mean_term = ((self.mean - other.mean) / other.std).pow(2)
        return 0.5 * (var_ratio + mean_term - 1.0 - torch.log(var_ratio)).sum(dim=-1)

    def detach(self) -> DiagGaussian:
        return DiagGaussian(self.mean.detach(), self.log_std.detach())


class MultiCategorical:
    """Independent categoricals for a MultiDiscrete space: ``logits [B, sum(nvec)]`` split per
    sub-action; actions are ``[B, len(nvec)]``. An action ``mask [B, sum(nvec)]`` is split the
    same way (one mask per sub-space, concatenated)."""

    def __init__(
        self,
        logits: torch.Tensor,
        nvec: list[int] | tuple[int, ...],
        mask: torch.Tensor | None = None,
    ) -> None:
        self.nvec = tuple(int(n) for n in nvec)
        masks: Any = (
            torch.split(mask.reshape(mask.shape[0], -1), self.nvec, dim=-1)
            if mask is not None
            else [None] * len(self.nvec)
        )
        self.parts = [
            Categorical(lg, m) for lg, m in zip(torch.split(logits, self.nvec, dim=-1), masks)
        ]

    def sample(self) -> torch.Tensor:
        return torch.stack([p.sample() for p in self.parts], dim=-1)

    def mode(self) -> torch.Tensor:
        return torch.stack([p.mode() for p in self.parts], dim=-1)

    def log_prob(self, act: torch.Tensor) -> torch.Tensor:
        return sum(p.log_prob(act[..., i]) for i, p in enumerate(self.parts))  # type: ignore[return-value]

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)  # type: ignore[return-value]

    def kl(self, other: Distribution) -> torch.Tensor:
        assert isinstance(other, MultiCategorical)
        return sum(p.kl(q) for p, q in zip(self.parts, other.parts))  # type: ignore[return-value]

    def detach(self) -> MultiCategorical:
        out = MultiCategorical.__new__(MultiCategorical)
        out.nvec = self.nvec
        out.parts = [p.detach() for p in self.parts]
        return out

    def masked(self, mask: torch.Tensor | None) -> MultiCategorical:
        """This distribution restricted to the legal actions of ``mask`` (one mask per
        sub-space, concatenated); itself without one."""
        if mask is None:
            return self
        logits = torch.cat([p.logits for p in self.parts], dim=-1)
        return MultiCategorical(logits, self.nvec, mask)
