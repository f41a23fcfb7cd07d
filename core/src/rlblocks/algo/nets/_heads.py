"""Actor and critic networks for policy-gradient algorithms.

:class:`Actor` maps features ``[B, in_dim]`` to an action distribution that matches the action
space: :class:`~rlblocks.algo.Categorical` for Discrete,
:class:`~rlblocks.algo.MultiCategorical` for MultiDiscrete and
:class:`~rlblocks.algo.DiagGaussian` for Box (a state-independent, learned log standard
deviation, as in the PPO and TRPO papers' MuJoCo experiments). :class:`Critic` maps features to a
state value ``[B]``. Orthogonal initialisation with small output gains (0.01 for the policy head)
is the default because it is one of the implementation details that make PPO work reliably.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo._distributions import Categorical, DiagGaussian, Distribution, MultiCategorical
from rlblocks.algo.nets._mlp import MLP

__all__ = ["Actor", "Critic", "orthogonal_init"]


def orthogonal_init(module: nn.Module, output_gain: float) -> None:
    """Orthogonal weights (gain sqrt(2) for hidden layers, ``output_gain`` for the last linear
    layer) and zero biases."""
    linears = [m for m in module.modules() if isinstance(m, nn.Linear)]
    for i, layer in enumerate(linears):
        gain = output_gain if i == len(linears) - 1 else math.sqrt(2.0)
        nn.init.orthogonal_(layer.weight, gain=gain)
        nn.init.zeros_(layer.bias)


class Actor(nn.Module):
    """``features [B, in_dim] -> distribution`` for a Discrete, MultiDiscrete or Box action space.

    For Box actions the mean is unbounded (the policy's ``map_action`` clips or squashes it into
    the space) and ``log_std`` is one learned parameter per action dimension. ``net`` replaces
    the MLP by your own module from features to :meth:`out_dim` numbers (logits, or the mean).
    """

    def __init__(
        self,
        in_dim: int,
        action_space: gym.Space,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        log_std_init: float = 0.0,
        ortho_init: bool = True,
        net: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.action_space = action_space
        self.log_std: nn.Parameter | None = None
        if isinstance(action_space, gym.spaces.Discrete):
            out = int(action_space.n)
            self.kind = "categorical"
        elif isinstance(action_space, gym.spaces.MultiDiscrete):
            self.nvec = [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
            out = sum(self.nvec)
            self.kind = "multi"
        elif isinstance(action_space, gym.spaces.Box):
            out = int(np.prod(action_space.shape))
            self.kind = "gaussian"
            self.log_std = nn.Parameter(torch.full((out,), float(log_std_init)))
        else:
            raise TypeError(
                f"no default actor for {type(action_space).__name__} actions; use Discrete, "
                "MultiDiscrete or Box, or pass your own actor"
            )
        if net is not None:
            self.net: nn.Module = net
            return
        self.net = MLP(in_dim, hidden, out, activation=activation)
        if ortho_init:
            orthogonal_init(self.net, output_gain=0.01)

    @staticmethod
    def out_dim(action_space: gym.Space) -> int:
        """How many numbers the network gives per row for ``action_space``: logits of each
        action (Discrete), of each sub-action (MultiDiscrete, concatenated) or the Gaussian's
        mean (Box)."""
        if isinstance(action_space, gym.spaces.MultiDiscrete):
            return int(np.sum(action_space.nvec))
        if isinstance(action_space, gym.spaces.Discrete):
            return int(action_space.n)
        return int(np.prod(action_space.shape))

    def forward(self, features: torch.Tensor) -> Distribution:
        out = self.net(features)
        if self.kind == "categorical":
            return Categorical(out)
        if self.kind == "multi":
            return MultiCategorical(out, self.nvec)
        assert self.log_std is not None
        return DiagGaussian(out, self.log_std)


class Critic(nn.Module):
    """``features [B, in_dim] -> V(s) [B]``. ``net`` replaces the MLP by your own module from
    features to ``[B, 1]`` (or to ``[B]``: then ``squeeze=False``)."""

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int] = (64, 64),
        activation: str = "tanh",
        ortho_init: bool = True,
        net: nn.Module | None = None,
        squeeze: bool = True,
    ) -> None:
        super().__init__()
        self.squeeze = squeeze
        if net is not None:
            self.net: nn.Module = net
            return
        self.net = MLP(in_dim, hidden, 1, activation=activation)
        if ortho_init:
            orthogonal_init(self.net, output_gain=1.0)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        value = self.net(features)
        return value.squeeze(-1) if self.squeeze else value
