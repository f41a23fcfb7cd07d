"""Multi-layer perceptrons, the Q-value head (plain or dueling) and :func:`network_body`, the
builder of a default network that `algo.network` picks (MLP or SimBa)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlblocks.algo.nets._simba import NETWORKS, SIMBA_DEFAULTS, SimbaMLP, simba_size
from rlblocks.contracts import validators

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
}
# configs check names against rlblocks.contracts.validators.ACTIVATIONS (no torch there); a
# test pins that the two agree


def activation_class(name: str) -> type[nn.Module]:
    """Look up an activation by name (``relu``, ``tanh``, ``elu``, ``gelu``, ``silu``)."""
    try:
        return _ACTIVATIONS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), validators.ACTIVATIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ";"
        raise ValueError(
            f"unknown activation {name!r}{hint} choose one of: {', '.join(validators.ACTIVATIONS)}"
        ) from None


def obs_dim(space: gym.Space) -> int:
    """Flat input size of an observation space (Box and Discrete)."""
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    raise TypeError(
        f"the default MLP encoder takes Box and Discrete observations, not {type(space).__name__}; "
        "pass your own network"
    )


class MLP(nn.Sequential):
    """``in -> hidden... -> out`` with an activation between layers (none after the last)."""

    def __init__(
        self,
        in_dim: int,
        hidden: Sequence[int],
        out_dim: int | None = None,
        activation: str = "relu",
    ) -> None:
        act = activation_class(activation)
        layers: list[nn.Module] = []
        last = in_dim
        for width in hidden:
            layers += [nn.Linear(last, width), act()]
            last = width
        if out_dim is not None:
            layers.append(nn.Linear(last, out_dim))
            last = out_dim
        super().__init__(*layers)
        self.out_dim = last


def network_body(
    config: Any,
    part: str,
    in_dim: int,
    out_dim: int | None,
    hidden: Sequence[int],
    activation: str = "relu",
) -> nn.Module:
    """The network of ``part`` (``"actor"`` or ``"critic"``) that ``config.network`` names:
    an :class:`~rlblocks.algo.nets.MLP` of ``hidden`` widths, or a :class:`SimbaMLP` sized by
    :func:`simba_size`. Both have ``out_dim``."""
    network = getattr(config, "network", "mlp")
    if network == "simba":
        width, blocks = simba_size(config, part)
        return SimbaMLP(in_dim, width, blocks, out_dim)
    if network != "mlp":
        raise ValueError(f"unknown network {network!r}; choose one of: {', '.join(NETWORKS)}")
    return MLP(in_dim, hidden, out_dim, activation=activation)


class QNetwork(nn.Module):
    """Q-values for every discrete action; ``dueling`` splits value and advantage streams
    (Q = V + A - mean(A)), which helps when many actions have similar values.

    With an ``encoder`` (any module with ``out_dim``, e.g. :class:`~rlblocks.algo.nets.ObsEncoder`)
    the network takes raw observations and trains the encoder with the Q loss; ``in_dim`` is
    then the encoder's ``out_dim``. ``network="simba"`` makes the body a
    :class:`~rlblocks.algo.nets.SimbaMLP` (``network_width`` / ``network_blocks``, None: 512 and
    2, the SimBa paper's critic) with linear value and advantage heads when dueling."""

    def __init__(
        self,
        in_dim: int,
        num_actions: int,
        hidden: Sequence[int] = (128, 128),
        dueling: bool = False,
        activation: str = "relu",
        encoder: nn.Module | None = None,
        network: str = "mlp",
        network_width: int | None = None,
        network_blocks: int | None = None,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.dueling = dueling
        if network == "simba":
            width, blocks = SIMBA_DEFAULTS["critic"]
            width = network_width if network_width is not None else width
            blocks = network_blocks if network_blocks is not None else blocks
            if dueling:
                self.body = SimbaMLP(in_dim, width, blocks)
                self.value = nn.Linear(width, 1)
                self.advantage = nn.Linear(width, num_actions)
            else:
                self.body = SimbaMLP(in_dim, width, blocks, num_actions)
        elif dueling:
            body = list(hidden[:-1]) if len(hidden) > 1 else list(hidden)
            head = hidden[-1]
            self.body = MLP(in_dim, body, activation=activation)
            self.value = MLP(self.body.out_dim, [head], 1, activation=activation)
            self.advantage = MLP(self.body.out_dim, [head], num_actions, activation=activation)
        else:
            self.body = MLP(in_dim, hidden, num_actions, activation=activation)

    def forward(self, obs: Any) -> torch.Tensor:
        """``obs [B, in_dim]`` (or raw observations with an encoder) ``-> q [B, num_actions]``."""
        x = self.encoder(obs) if self.encoder is not None else obs.flatten(1)
        h = self.body(x)
        if not self.dueling:
            return h
        adv = self.advantage(h)
        return self.value(h) + adv - adv.mean(dim=1, keepdim=True)
