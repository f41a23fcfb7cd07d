"""R2D2's recurrent Q-network: observation encoder -> torso MLP -> recurrent core -> Q head.

The paper's network is a convolutional torso, an LSTM and a dueling head; here the torso is
core's observation encoder (a CNN for image Boxes, flattening and one-hot encoding otherwise)
followed by optional MLP layers, the core is :class:`~rlblocks.algo.nets.RecurrentBody` (LSTM or
GRU), and the head is an MLP, dueling or plain. The same network serves acting (:meth:`step`,
one observation per env and the state the collector carries) and learning (:meth:`sequence`,
``[B, T]`` windows from a stored state); both give the same numbers for the same inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from rlblocks.algo.nets import MLP, RecurrentBody

__all__ = ["RecurrentQNetwork", "merge_time", "split_time"]

State = dict[str, torch.Tensor]


def merge_time(obs: Any) -> Any:
    """Observation tensors ``[B, T, ...]`` (or a dict of them) as ``[B * T, ...]``."""
    if isinstance(obs, Mapping):
        return {k: merge_time(v) for k, v in obs.items()}
    return obs.reshape(obs.shape[0] * obs.shape[1], *obs.shape[2:])


def split_time(x: torch.Tensor, batch: int, length: int) -> torch.Tensor:
    """``[B * T, ...] -> [B, T, ...]``."""
    return x.reshape(batch, length, *x.shape[1:])


def _leading_shape(obs: Any) -> tuple[int, ...]:
    while isinstance(obs, Mapping):
        obs = next(iter(obs.values()))
    return tuple(obs.shape[:2])


class RecurrentQNetwork(nn.Module):
    """Q-values of every action from a recurrent state.

    Args:
        encoder: observation encoder with ``out_dim`` (core's ``make_encoder``).
        num_actions: size of the Discrete action space.
        torso: widths of the MLP between encoder and recurrent core (may be empty).
        hidden_size, cell, num_layers: the :class:`~rlblocks.algo.nets.RecurrentBody`.
        head: widths of the Q head's hidden layers.
        dueling: Q = V + A - mean(A) from separate value and advantage streams.
        activation: activation of the MLP layers.
    """

    def __init__(
        self,
        encoder: nn.Module,
        num_actions: int,
        torso: Sequence[int] = (64,),
        hidden_size: int = 64,
        cell: str = "lstm",
        num_layers: int = 1,
        head: Sequence[int] = (64,),
        dueling: bool = False,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.torso = MLP(int(encoder.out_dim), list(torso), activation=activation)
        # the torso ends with an activation when it has layers (MLP with no out_dim)
        self.core = RecurrentBody(self.torso.out_dim, hidden_size, cell=cell, num_layers=num_layers)
        self.dueling = bool(dueling)
        self.num_actions = int(num_actions)
        if self.dueling:
            self.value = MLP(self.core.out_dim, list(head), 1, activation=activation)
            self.advantage = MLP(self.core.out_dim, list(head), num_actions, activation=activation)
        else:
            self.head = MLP(self.core.out_dim, list(head), num_actions, activation=activation)

    # -- pieces -------------------------------------------------------------------------------
    def initial_state(self, batch_size: int) -> State:
        """The zero state of ``batch_size`` fresh episodes."""
        return self.core.initial_state(batch_size)

    def features(self, obs: Any) -> torch.Tensor:
        """``obs [N, ...] -> [N, torso out]``: the encoder and the torso."""
        return self.torso(self.encoder(obs))

    def q_head(self, y: torch.Tensor) -> torch.Tensor:
        """Recurrent outputs ``[..., hidden]`` -> Q-values ``[..., A]``."""
        if not self.dueling:
            return self.head(y)
        adv = self.advantage(y)
        return self.value(y) + adv - adv.mean(dim=-1, keepdim=True)

    # -- acting and learning ------------------------------------------------------------------
    def step(self, obs: Any, state: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, State]:
        """One step of every env: ``obs [B, ...]`` and the state entering it (None: zeros)
        -> ``(q [B, A], new state)``."""
        y, new_state = self.core.step(self.features(obs), state)
        return self.q_head(y), new_state

    def sequence_features(self, obs: Any) -> torch.Tensor:
        """``obs [B, T, ...] -> [B, T, torso out]`` (one batched pass over every step)."""
        batch, length = _leading_shape(obs)
        return split_time(self.features(merge_time(obs)), batch, length)

    def sequence(
        self,
        obs: Any,
        state0: Mapping[str, Any] | None = None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """``obs [B, T, ...]`` from ``state0`` -> ``(q [B, T, A], state after step T)``;
        ``starts [B, T]`` zeroes the state entering steps that begin an episode (see
        :meth:`RecurrentBody.sequence`)."""
        y, state = self.core.sequence(self.sequence_features(obs), state0, starts)
        return self.q_head(y), state

    def forward(self, obs: Any, state: Mapping[str, Any] | None = None) -> torch.Tensor:
        """``q [B, A]`` of one step (the new state is dropped; use :meth:`step` to keep it)."""
        return self.step(obs, state)[0]
