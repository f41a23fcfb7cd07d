"""Recurrent (LSTM / GRU) bodies for policies that must remember: partially observed envs,
recurrent PPO, R2D2.

A :class:`RecurrentBody` is used two ways, and both give the same numbers for the same inputs:

* **acting** — :meth:`RecurrentBody.step` takes one observation feature per env and the state
  the collector carried for that env, and returns the new state for the collector to carry;
* **learning** — :meth:`RecurrentBody.sequence` replays ``[B, T]`` windows from the buffer from a
  stored (or zero) state, zeroing it wherever an episode begins inside the window.

The state is a dict of tensors with the **batch axis first**: ``{"h": [B, layers, H]}`` for a GRU
and ``{"h": ..., "c": ...}`` for an LSTM. Batch-first is what the collector (which takes, puts
and zeroes rows of the state per env, on axis 0) and the buffer (which stores a policy's outputs
row by row) need; torch's RNN modules want ``[layers, B, H]``, and the body transposes at the
boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

import torch
from torch import nn

__all__ = ["RecurrentBody", "detach_state"]

_CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}

#: a recurrent state: ``{"h": [B, layers, H]}`` (GRU) or ``{"h": ..., "c": ...}`` (LSTM)
State = dict[str, torch.Tensor]


def detach_state(state: Mapping[str, Any] | None) -> State | None:
    """The state cut from the autograd graph (truncated backpropagation through time: a window
    learned from the state another window ended with must not backpropagate into that one)."""
    if state is None:
        return None
    return {key: value.detach() for key, value in state.items()}


class RecurrentBody(nn.Module):
    """``in_dim -> hidden_size`` through ``num_layers`` of LSTM or GRU (``cell="lstm"|"gru"``).

    ``out_dim`` is ``hidden_size``, so heads and encoders compose with it as with an MLP body.
    States are dicts of ``[B, num_layers, hidden_size]`` tensors (see the module docstring);
    ``None`` anywhere a state is taken means the zero state of a fresh episode."""

    def __init__(
        self, in_dim: int, hidden_size: int, cell: str = "lstm", num_layers: int = 1
    ) -> None:
        super().__init__()
        if cell not in _CELLS:
            raise ValueError(f"unknown recurrent cell {cell!r}; choose one of: {', '.join(_CELLS)}")
        if int(num_layers) < 1 or int(hidden_size) < 1:
            raise ValueError(
                f"hidden_size and num_layers must be >= 1, got {hidden_size} and {num_layers}"
            )
        self.cell = cell
        self.in_dim = int(in_dim)
        self.hidden_size = int(hidden_size)
        self.num_layers = int(num_layers)
        self.rnn = _CELLS[cell](self.in_dim, self.hidden_size, self.num_layers, batch_first=True)
        self.out_dim = self.hidden_size
        #: the state's keys: the hidden state, and the LSTM's cell state
        self.state_keys: tuple[str, ...] = ("h", "c") if cell == "lstm" else ("h",)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> State:
        """The zero state of ``batch_size`` fresh episodes (on the parameters' device by
        default, in their dtype)."""
        weight = next(self.rnn.parameters())
        shape = (int(batch_size), self.num_layers, self.hidden_size)
        dev = weight.device if device is None else device
        return {key: torch.zeros(shape, dtype=weight.dtype, device=dev) for key in self.state_keys}

    # -- layout conversions: ours [B, layers, H] <-> torch's [layers, B, H] ---------------------
    def _to_torch(self, state: Mapping[str, Any] | None, x: torch.Tensor) -> Any:
        """The state as torch's RNN modules take it (None stays None: torch starts from zeros).
        Accepts tensors or arrays (a state read back from the buffer or a checkpoint)."""
        if state is None:
            return None
        parts = []
        for key in self.state_keys:
            value = torch.as_tensor(state[key], dtype=x.dtype, device=x.device)
            if value.shape != (x.shape[0], self.num_layers, self.hidden_size):
                raise ValueError(
                    f"recurrent state {key!r} has shape {tuple(value.shape)}; expected "
                    f"[batch={x.shape[0]}, layers={self.num_layers}, hidden={self.hidden_size}]"
                )
            parts.append(value.transpose(0, 1).contiguous())
        return tuple(parts) if self.cell == "lstm" else parts[0]

    def _from_torch(self, hidden: Any) -> State:
        parts = hidden if self.cell == "lstm" else (hidden,)
        return {
            key: part.transpose(0, 1).contiguous()
            for key, part in zip(self.state_keys, parts, strict=True)
        }

    @staticmethod
    def _zero_rows(hidden: Any, rows: torch.Tensor) -> Any:
        """torch-layout state with the batch rows where ``rows`` is True set to zero (out of
        place, so gradients still flow to the other rows)."""
        mask = rows.view(1, -1, 1)
        if isinstance(hidden, tuple):
            return tuple(part.masked_fill(mask, 0.0) for part in hidden)
        return hidden.masked_fill(mask, 0.0)

    # -- acting and learning -------------------------------------------------------------------
    def step(
        self, x: torch.Tensor, state: Mapping[str, Any] | None = None
    ) -> tuple[torch.Tensor, State]:
        """One step of every env: ``x [B, in_dim]`` and the state entering it (None: zeros)
        -> ``(y [B, hidden_size], new_state)``."""
        if x.dim() != 2:
            raise ValueError(f"step takes x of shape [B, in_dim], got {tuple(x.shape)}")
        y, hidden = self.rnn(x.unsqueeze(1), self._to_torch(state, x))
        return y[:, 0], self._from_torch(hidden)

    def sequence(
        self,
        x: torch.Tensor,
        state0: Mapping[str, Any] | None = None,
        starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """Run ``T`` steps: ``x [B, T, in_dim]`` from ``state0`` (None: zeros) ->
        ``(y [B, T, hidden_size], state after step T)``.

        ``starts [B, T]`` (bool) marks steps that begin an episode: the state entering such a
        step is zeroed, as the collector zeroes it when acting, so that an episode never sees
        its predecessor's memory. Without a start after column 0 the whole window is one call
        of the fused RNN; otherwise it runs in segments split at the columns where some row
        restarts, zeroing those rows' state between segments. The returned state is the one
        after the window's last column (padding steps included: mask them out yourself)."""
        if x.dim() != 3:
            raise ValueError(f"sequence takes x of shape [B, T, in_dim], got {tuple(x.shape)}")
        batch, length = x.shape[0], x.shape[1]
        if length == 0:
            raise ValueError("sequence needs at least one step (T >= 1)")
        hidden = self._to_torch(state0, x)
        if starts is None:
            y, hidden = self.rnn(x, hidden)
            return y, self._from_torch(hidden)
        starts = torch.as_tensor(starts, dtype=torch.bool, device=x.device)
        if starts.shape != (batch, length):
            raise ValueError(
                f"starts has shape {tuple(starts.shape)}; expected [B, T] = [{batch}, {length}]"
            )
        if hidden is not None and bool(starts[:, 0].any()):  # (None already means zeros)
            hidden = self._zero_rows(hidden, starts[:, 0])
        # columns (after 0) where some row restarts: the segment boundaries
        cuts = torch.nonzero(starts[:, 1:].any(dim=0)).flatten().add(1).tolist()
        if not cuts:
            y, hidden = self.rnn(x, hidden)
            return y, self._from_torch(hidden)
        outputs = []
        for begin, end in pairwise([0, *cuts, length]):
            if begin > 0:
                hidden = self._zero_rows(hidden, starts[:, begin])
            y, hidden = self.rnn(x[:, begin:end], hidden)
            outputs.append(y)
        return torch.cat(outputs, dim=1), self._from_torch(hidden)

    def extra_repr(self) -> str:
        return f"cell={self.cell!r}, out_dim={self.out_dim}"
