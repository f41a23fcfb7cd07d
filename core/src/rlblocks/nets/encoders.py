"""Observation encoders: turn what the env returns (arrays, or dicts of arrays for Dict spaces)
into one flat float tensor ``[B, out_dim]`` that actor and critic bodies read.

The default :class:`FlattenEncoder` flattens Box observations, one-hot encodes Discrete and
MultiDiscrete ones, and concatenates the parts of a Dict space in the space's key order. A user
module replaces it when observations need more (a CNN for images): any ``nn.Module`` that takes
the observation (a tensor, or a dict of tensors for Dict spaces) and has an ``out_dim`` attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FlattenEncoder", "obs_to_tensor"]


def obs_to_tensor(obs: Any, device: torch.device | str = "cpu") -> Any:
    """A numpy observation (or dict/Batch of them) as tensors: floats become float32, integers
    stay integers (Discrete indices)."""
    if isinstance(obs, torch.Tensor):
        return obs.to(device)
    if isinstance(obs, Mapping) or hasattr(obs, "keys"):
        return {k: obs_to_tensor(obs[k], device) for k in obs.keys()}  # noqa: SIM118
    arr = np.asarray(obs)
    if arr.dtype.kind == "f":
        return torch.as_tensor(arr, dtype=torch.float32, device=device)
    if arr.dtype.kind == "b":
        return torch.as_tensor(arr, dtype=torch.float32, device=device)
    return torch.as_tensor(arr, device=device)


def _part_dim(space: gym.Space) -> int:
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    if isinstance(space, gym.spaces.MultiBinary):
        return int(np.prod(space.shape))
    raise TypeError(
        f"the default encoder cannot flatten {type(space).__name__} observations; pass your own "
        "encoder module (taking the observation, with an out_dim attribute)"
    )


class FlattenEncoder(nn.Module):
    """Flatten Box, one-hot Discrete / MultiDiscrete, concatenate the entries of a Dict space."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        self.space = space
        if isinstance(space, gym.spaces.Dict):
            self.keys = tuple(space.spaces)
            self.out_dim = sum(_part_dim(s) for s in space.spaces.values())
        else:
            self.keys = ()
            self.out_dim = _part_dim(space)

    @staticmethod
    def _encode(space: gym.Space, x: torch.Tensor) -> torch.Tensor:
        if isinstance(space, gym.spaces.Discrete):
            return F.one_hot((x.long() - int(space.start)).reshape(-1), int(space.n)).float()
        if isinstance(space, gym.spaces.MultiDiscrete):
            idx = (x.long() - torch.as_tensor(space.start)).reshape(x.shape[0], -1)
            parts = [
                F.one_hot(idx[:, i], int(n)).float() for i, n in enumerate(space.nvec.reshape(-1))
            ]
            return torch.cat(parts, dim=1)
        return x.reshape(x.shape[0], -1).float()

    def forward(self, obs: Any) -> torch.Tensor:
        """``obs [B, ...]`` (or a dict of them) -> ``[B, out_dim]`` float32."""
        if self.keys:
            sub = self.space.spaces  # type: ignore[attr-defined]
            return torch.cat([self._encode(sub[k], obs[k]) for k in self.keys], dim=1)
        return self._encode(self.space, obs)
