"""Actors for off-policy algorithms: deterministic (DDPG, TD3), tanh-squashed Gaussian (SAC,
REDQ), and the two that advantage-weighted offline algorithms (IQL, CRR, AWAC) clone the
dataset's actions with: a Gaussian around a tanh mean with one learned standard deviation per
action dimension (Box) and a categorical (Discrete). All take raw observations (as tensors),
encode them with their own :class:`~rlblocks.algo.nets.ObsEncoder`; continuous actions are in
``[-1, 1]`` — the policy's ``map_action`` scales them to the env's bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.algo._distributions import Categorical, DiagGaussian
from rlblocks.algo.nets._mlp import MLP

__all__ = ["CategoricalActor", "DeterministicActor", "GaussianActor", "SquashedGaussianActor"]

_LOG_2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class DeterministicActor(nn.Module):
    """``a = tanh(MLP(encoder(obs)))``, actions ``[B, act_dim]`` in ``[-1, 1]``. ``net``
    replaces the MLP by your own head from features to ``[B, act_dim]`` (before the tanh)."""

    def __init__(
        self,
        encoder: nn.Module,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net if net is not None else MLP(
            int(encoder.out_dim), hidden, act_dim, activation=activation
        )  # fmt: skip

    def forward(self, obs: Any) -> torch.Tensor:
        return torch.tanh(self.net(self.encoder(obs)))


class SquashedGaussianActor(nn.Module):
    """A diagonal Gaussian whose samples go through ``tanh`` (SAC's policy, Haarnoja et al. 2018,
    appendix C): the network outputs a mean and a state-dependent log standard deviation
    (clamped to ``log_std_bounds``); ``forward`` returns reparameterised actions in ``[-1, 1]``
    and their log-probabilities with the change-of-variables correction
    ``log pi(a) = log N(u) - sum log(1 - tanh(u)^2)``, written in the stable form
    ``2 (log 2 - u - softplus(-2u))``. ``net`` replaces the MLP and its output layer by your
    own head from features to ``[B, 2 * act_dim]`` (the mean, then the log standard
    deviation)."""

    def __init__(
        self,
        encoder: nn.Module,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        log_std_bounds: tuple[float, float] = (-20.0, 2.0),
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.act_dim = act_dim
        self.body: nn.Module
        self.head: nn.Module
        if net is not None:
            self.body, self.head = net, nn.Identity()
        else:
            self.body = MLP(int(encoder.out_dim), hidden, activation=activation)
            self.head = nn.Linear(self.body.out_dim, 2 * act_dim)
        self.log_std_min, self.log_std_max = (float(b) for b in log_std_bounds)

    def distribution(self, obs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mean, log_std)``, each ``[B, act_dim]``, before squashing."""
        mean, log_std = self.head(self.body(self.encoder(obs))).chunk(2, dim=-1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    def forward(
        self, obs: Any, deterministic: bool = False, with_log_prob: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(act [B, act_dim], log_prob [B] or None)``; ``deterministic`` takes ``tanh(mean)``."""
        mean, log_std = self.distribution(obs)
        if deterministic:
            u = mean
            noise = None
        else:
            noise = torch.randn_like(mean)
            u = mean + log_std.exp() * noise
        act = torch.tanh(u)
        if not with_log_prob:
            return act, None
        if noise is None:
            noise = torch.zeros_like(mean)
        return act, _squashed_log_prob(noise, log_std, u)

    def sample(self, obs: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` reparameterised actions per state and their log-probabilities, ``([B, n,
        act_dim], [B, n])``, from one pass of the network over the ``B`` states (the
        distribution depends on the state only): what CQL's and similar estimates over many
        sampled actions need, without running the network on every state ``n`` times."""
        mean, log_std = self.distribution(obs)
        mean, log_std = mean.unsqueeze(1), log_std.unsqueeze(1)
        noise = torch.randn(
            (mean.shape[0], n, mean.shape[-1]), device=mean.device, dtype=mean.dtype
        )
        u = mean + log_std.exp() * noise
        return torch.tanh(u), _squashed_log_prob(noise, log_std, u)

    def log_prob(self, obs: Any, act: torch.Tensor, inside: float = 1.0 - 1e-6) -> torch.Tensor:
        """``log pi(a|s)`` ``[B]`` of given actions in [-1, 1] (a dataset's: behaviour cloning,
        offline RL), computed as for the actor's own samples at ``u = atanh(a)``; actions on the
        bounds are read ``inside`` of them, where the density is finite."""
        mean, log_std = self.distribution(obs)
        u = torch.atanh(act.clamp(-inside, inside))
        return _squashed_log_prob((u - mean) * torch.exp(-log_std), log_std, u)


def _squashed_log_prob(noise: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The Gaussian's log density at standardised ``noise`` minus the tanh change of variables
    ``sum log(1 - tanh(u)^2)`` (in its stable softplus form), summed over action dims."""
    log_prob = (-0.5 * noise.pow(2) - log_std - _HALF_LOG_2PI).sum(-1)
    return log_prob - (2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)


class GaussianActor(nn.Module):
    """``pi(.|s) = N(tanh(mu(s)), diag(sigma^2))``: a network for the mean, squashed into the
    actions' [-1, 1], and one learned log standard deviation per action dimension, the same in
    every state, clamped to ``log_std_bounds``. Its log-likelihood of any action in [-1, 1] is
    exact and cheap (no change of variables), which is what policies that clone weighted
    dataset actions need (IQL's policy for locomotion, CRR, AWAC). ``net`` replaces the MLP by
    your own head from features to ``[B, act_dim]`` (the mean before its tanh)."""

    def __init__(
        self,
        encoder: nn.Module,
        act_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        log_std_bounds: tuple[float, float] = (-5.0, 2.0),
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net if net is not None else MLP(
            int(encoder.out_dim), hidden, act_dim, activation=activation
        )  # fmt: skip
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.log_std_min, self.log_std_max = (float(b) for b in log_std_bounds)

    def forward(self, obs: Any) -> DiagGaussian:
        mean = torch.tanh(self.net(self.encoder(obs)))
        return DiagGaussian(mean, self.log_std.clamp(self.log_std_min, self.log_std_max))


class CategoricalActor(nn.Module):
    """``pi(.|s)``, a categorical over ``num_actions`` actions: ``obs -> logits [B, A]`` over an
    encoder. ``net`` replaces the MLP by your own head from features to the logits."""

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        hidden: Sequence[int] = (256, 256),
        activation: str = "relu",
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.net = net if net is not None else MLP(
            int(encoder.out_dim), hidden, num_actions, activation=activation
        )  # fmt: skip

    def forward(self, obs: Any) -> Categorical:
        return Categorical(self.net(self.encoder(obs)))
