"""Q-networks of the distributional family: a value per action and atom (C51's logits, QR-DQN's
quantiles), per sampled fraction (IQN, FQF), and FQF's fraction proposals. Each takes raw
observations through an encoder (:class:`~rlblocks.algo.nets.ObsEncoder`), and can be dueling and
noisy (:mod:`rlblocks.algo.nets`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from rlblocks.algo._distributional import cosine_features
from rlblocks.algo.nets._mlp import activation_class
from rlblocks.algo.nets._noisy import noisy_mlp

__all__ = ["AtomQNetwork", "FractionProposal", "ImplicitQuantileNetwork"]


def _encode(encoder: nn.Module | None, obs: Any) -> torch.Tensor:
    return encoder(obs) if encoder is not None else obs.flatten(1)


class AtomQNetwork(nn.Module):
    """``obs -> [B, A, N]``: ``N`` outputs per action (C51's logits over a fixed support,
    QR-DQN's quantile values). With ``dueling`` a value stream ``[B, 1, N]`` and an advantage
    stream ``[B, A, N]`` are combined as ``V + A - mean_a A`` atom by atom; with ``noisy`` every
    linear layer is a :class:`~rlblocks.algo.nets.NoisyLinear`."""

    def __init__(
        self,
        in_dim: int,
        num_actions: int,
        num_atoms: int,
        hidden: Sequence[int] = (128, 128),
        dueling: bool = False,
        noisy: bool = False,
        sigma0: float = 0.5,
        activation: str = "relu",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.num_actions, self.num_atoms, self.dueling = num_actions, num_atoms, dueling
        kw = {"activation": activation, "noisy": noisy, "sigma0": sigma0}
        if dueling:
            body = list(hidden[:-1]) if len(hidden) > 1 else list(hidden)
            self.body = noisy_mlp(in_dim, body, **kw)
            width = self.body.out_dim  # type: ignore[attr-defined]
            self.value = noisy_mlp(width, [hidden[-1]], num_atoms, **kw)
            self.advantage = noisy_mlp(width, [hidden[-1]], num_actions * num_atoms, **kw)
        else:
            self.body = noisy_mlp(in_dim, hidden, num_actions * num_atoms, **kw)

    def forward(self, obs: Any) -> torch.Tensor:
        h = self.body(_encode(self.encoder, obs))
        if not self.dueling:
            return h.view(-1, self.num_actions, self.num_atoms)
        value = self.value(h).view(-1, 1, self.num_atoms)
        adv = self.advantage(h).view(-1, self.num_actions, self.num_atoms)
        return value + adv - adv.mean(dim=1, keepdim=True)


class ImplicitQuantileNetwork(nn.Module):
    """IQN's network (Dabney et al. 2018b): state features ``phi(s) [B, H]`` from the encoder and
    the first hidden layer; each fraction ``tau`` embedded as ``relu(W cos(pi i tau) + b)``
    ``[B, K, H]``; their elementwise product through the remaining layers gives ``[B, K, A]``
    quantile values. :meth:`features` and :meth:`quantiles` split the two halves (FQF proposes
    its fractions from the features)."""

    def __init__(
        self,
        in_dim: int,
        num_actions: int,
        hidden: Sequence[int] = (128, 128),
        embedding_dim: int = 64,
        dueling: bool = False,
        noisy: bool = False,
        sigma0: float = 0.5,
        activation: str = "relu",
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not hidden:
            raise ValueError("an implicit quantile network needs at least one hidden layer")
        self.encoder = encoder
        self.num_actions, self.embedding_dim, self.dueling = num_actions, embedding_dim, dueling
        kw = {"activation": activation, "noisy": noisy, "sigma0": sigma0}
        self.feature = noisy_mlp(in_dim, [hidden[0]], **kw)
        self.feature_dim = int(hidden[0])
        self.embed = nn.Sequential(
            nn.Linear(embedding_dim, self.feature_dim), activation_class(activation)()
        )
        rest = list(hidden[1:])
        if dueling:
            self.value = noisy_mlp(self.feature_dim, rest, 1, **kw)
            self.advantage = noisy_mlp(self.feature_dim, rest, num_actions, **kw)
        else:
            self.head = noisy_mlp(self.feature_dim, rest, num_actions, **kw)

    def features(self, obs: Any) -> torch.Tensor:
        """``phi(s)``: ``[B, H]``."""
        return self.feature(_encode(self.encoder, obs))

    def quantiles(self, features: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
        """Quantile values ``[B, K, A]`` at fractions ``taus [B, K]``."""
        psi = self.embed(cosine_features(taus, self.embedding_dim))  # [B, K, H]
        h = features.unsqueeze(1) * psi
        if not self.dueling:
            return self.head(h)
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=2, keepdim=True)

    def forward(self, obs: Any, taus: torch.Tensor) -> torch.Tensor:
        return self.quantiles(self.features(obs), taus)


class FractionProposal(nn.Module):
    """FQF's fraction proposal network (Yang et al. 2019): from state features ``[B, H]`` to
    ``N`` ascending fractions. Returns ``(taus [B, N+1], tau_hats [B, N], entropy [B])`` with
    ``tau_0 = 0``, ``tau_N = 1`` and ``tau_hat_i = (tau_i + tau_{i+1}) / 2``."""

    def __init__(self, feature_dim: int, num_fractions: int) -> None:
        super().__init__()
        self.num_fractions = num_fractions
        self.linear = nn.Linear(feature_dim, num_fractions)
        nn.init.xavier_uniform_(self.linear.weight, gain=0.01)
        nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        log_probs = torch.log_softmax(self.linear(features), dim=1)
        probs = log_probs.exp()
        cum = torch.cumsum(probs, dim=1)
        # tau_0 = 0 and tau_N = 1 exactly (the cumulative sum may miss 1 by rounding)
        ends = torch.zeros_like(cum[:, :1]), torch.ones_like(cum[:, :1])
        taus = torch.cat([ends[0], cum[:, :-1], ends[1]], dim=1)
        tau_hats = (taus[:, :-1] + taus[:, 1:]) / 2
        entropy = -(probs * log_probs).sum(dim=1)
        return taus, tau_hats, entropy
