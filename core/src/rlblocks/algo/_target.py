"""Target networks: a frozen copy of a network that follows it slowly, for stable bootstrapped
targets (DQN's hard copies every C steps; DDPG, TD3 and SAC's Polyak averaging).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["TargetNetwork"]


class TargetNetwork(nn.Module):
    """A copy of ``online`` that :meth:`update` moves towards it.

    With ``tau`` the copy moves that fraction of the way every update (Polyak averaging,
    ``target <- (1 - tau) * target + tau * online``); with ``tau=None`` it is replaced by the
    online weights every ``hard_update_interval`` updates. The copy never requires gradients
    and stays in eval mode; it is a submodule, so the owner's ``state_dict`` saves it.
    Call it like the network it copies: ``target(obs)``.
    """

    def __init__(
        self, online: nn.Module, tau: float | None = 0.005, hard_update_interval: int = 1
    ) -> None:
        super().__init__()
        if tau is not None and not 0.0 < tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau}")
        if tau is None and hard_update_interval < 1:
            raise ValueError(f"hard_update_interval must be >= 1, got {hard_update_interval}")
        self.tau = tau
        self.hard_update_interval = hard_update_interval
        self.net = copy.deepcopy(online)
        for module in self.net.modules():
            if isinstance(module, nn.RNNBase):
                # a copy's LSTM/GRU weights are separate tensors; cuDNN wants them in one block
                # (else it compacts them at every call); a no-op off CUDA
                module.flatten_parameters()
        self.net.requires_grad_(False)
        self.net.eval()
        # plain lists, not submodules: the online network belongs to the owner
        self._online_params = list(online.parameters())
        self._params = list(self.net.parameters())
        self._online_buffers = list(online.buffers())
        self._buffers_copy = list(self.net.buffers())
        self.updates = 0

    def _save_to_state_dict(self, destination, prefix, keep_vars):  # type: ignore[no-untyped-def]
        """Save the count of updates with the weights (as a 0-d tensor, like every other entry of
        a state dict): a restored copy keeps its schedule of hard copies (every
        ``hard_update_interval`` updates) instead of starting it over."""
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "updates"] = torch.tensor(self.updates, dtype=torch.long)

    def _load_from_state_dict(  # type: ignore[no-untyped-def]
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ) -> None:
        """Restore the count; weights saved without it (an earlier version's checkpoint) still
        load, and the count then stays where it is."""
        key = prefix + "updates"
        if key in state_dict:
            self.updates = int(state_dict[key])
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )
        if key in unexpected_keys:
            unexpected_keys.remove(key)

    def train(self, mode: bool = True) -> TargetNetwork:
        """The copy stays in eval mode whatever its owner does."""
        super().train(False)
        return self

    def forward(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        return self.net(*args, **kwargs)

    @torch.no_grad()
    def update(self) -> None:
        """One step towards the online network (Polyak) or a hard copy when due."""
        self.updates += 1
        if self.tau is not None:
            torch._foreach_lerp_(self._params, self._online_params, self.tau)
        elif self.updates % self.hard_update_interval == 0:
            torch._foreach_copy_(self._params, self._online_params)
        else:
            return
        if self._buffers_copy:  # normalisation statistics follow exactly
            torch._foreach_copy_(self._buffers_copy, self._online_buffers)
