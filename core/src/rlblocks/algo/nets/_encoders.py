"""Observation encoders: what the env returns (an array, or a nested dict / tuple of arrays) to
one float feature tensor ``[B, out_dim]`` that actor, critic and Q heads read.

:class:`ObsEncoder` walks the observation space once, at construction, and builds one part per
leaf:

* ``Box`` — flattened; an *image* Box (2-D or 3-D ``uint8``, or any 3-D Box whose channel axis is
  first or last with at most 4 channels and sides of at least 16) goes through a CNN instead:
  the Nature-DQN body (Mnih et al., 2015) for sides of at least 36 pixels, a small 3x3 body
  otherwise. ``uint8`` pixels are scaled to [0, 1]; channel-last images are moved to channel-first.
* ``Discrete`` (with its ``start``), ``MultiDiscrete`` (with its ``start``) — one-hot.
* ``MultiBinary`` — as floats.
* ``Dict`` (keys in the space's order) and ``Tuple`` — their parts concatenated, to any depth.
  Tuple entries are read as the keys ``"0"``, ``"1"``, ... (how the collector and the buffers
  carry them; :func:`obs_to_tensor` turns a tuple into such a dict). A Dict's top-level
  ``"action_mask"`` (PettingZoo's legal actions) is left out: it is no feature, policies mask
  their actions with it.

``images="flatten"`` treats images as plain Boxes; :class:`FlattenEncoder` is that encoder (no
parameters, so its features can be computed once per update). A user module replaces the
encoder when observations need more: any ``nn.Module`` that takes the observation (a tensor, or a
dict / tuple of tensors) and has an ``out_dim`` attribute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from rlblocks.contracts import ACTION_MASK_KEY, ConfigError, has_action_mask

__all__ = [
    "FlattenEncoder",
    "ImageEncoder",
    "ObsEncoder",
    "is_image_space",
    "make_encoder",
    "obs_to_tensor",
]


def obs_to_tensor(obs: Any, device: torch.device | str = "cpu") -> Any:
    """A numpy observation (or a dict / Batch / tuple of them) as tensors: floats and booleans
    become float32, integers stay integers (Discrete indices, uint8 pixels)."""
    if isinstance(obs, torch.Tensor):
        return obs.to(device)
    if isinstance(obs, Mapping) or hasattr(obs, "keys"):
        return {k: obs_to_tensor(obs[k], device) for k in obs.keys()}  # noqa: SIM118
    if isinstance(obs, tuple):  # Tuple entries are keyed "0", "1", ... as the buffers store them
        return {str(i): obs_to_tensor(o, device) for i, o in enumerate(obs)}
    arr = np.asarray(obs)
    if arr.dtype.kind in "fb":
        return torch.as_tensor(arr, dtype=torch.float32, device=device)
    return torch.as_tensor(arr, device=device)


def is_image_space(space: gym.Space) -> bool:
    """Whether a Box holds images: 2-D or 3-D ``uint8``, or 3-D with at most 4 channels first or
    last and both spatial sides >= 16."""
    if not isinstance(space, gym.spaces.Box) or len(space.shape) not in (2, 3):
        return False
    shape = space.shape
    if space.dtype == np.uint8:
        return min(_image_hw(shape)) >= 8
    if len(shape) != 3:
        return False
    return (shape[0] <= 4 or shape[-1] <= 4) and min(_image_hw(shape)) >= 16


def _channels_last(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 and shape[-1] <= 4 < shape[0]


def _image_hw(shape: tuple[int, ...]) -> tuple[int, int]:
    if len(shape) == 2:
        return shape[0], shape[1]
    return (shape[0], shape[1]) if _channels_last(shape) else (shape[1], shape[2])


class ImageEncoder(nn.Module):
    """A CNN over one image Box: ``[B, C, H, W]`` (or ``[B, H, W, C]``, ``[B, H, W]``) pixels to
    ``[B, features]``. The Nature-DQN body (32x8/4, 64x4/2, 64x3/1, then a linear layer) for
    images of at least 36x36, two 3x3 convolutions for smaller ones."""

    def __init__(self, space: gym.spaces.Box, features: int = 512) -> None:
        super().__init__()
        shape = tuple(int(s) for s in space.shape)
        self.channels_last = _channels_last(shape)
        self.add_channel = len(shape) == 2
        self.scale = 1.0 / 255.0 if space.dtype == np.uint8 else 1.0
        h, w = _image_hw(shape)
        c = 1 if self.add_channel else (shape[-1] if self.channels_last else shape[0])
        if min(h, w) >= 36:
            self.conv = nn.Sequential(
                nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
                nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
                nn.Flatten(),
            )  # fmt: skip
        else:
            self.conv = nn.Sequential(
                nn.Conv2d(c, 16, 3, stride=1), nn.ReLU(),
                nn.Conv2d(16, 32, 3, stride=1), nn.ReLU(),
                nn.Flatten(),
            )  # fmt: skip
        with torch.no_grad():
            n_flat = int(self.conv(torch.zeros(1, c, h, w)).shape[1])
        self.fc = nn.Sequential(nn.Linear(n_flat, features), nn.ReLU())
        self.out_dim = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if self.scale != 1.0:
            x = x * self.scale
        if self.add_channel:
            x = x.unsqueeze(1)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return self.fc(self.conv(x))


class _NoEncoder(ConfigError, TypeError):
    """An observation space the built-in encoder cannot read (a Text, Graph, Sequence... leaf,
    or no leaf at all): a config problem, and a TypeError as it was before it was one."""


def _no_encoder_message(space: gym.Space, path: tuple[Any, ...], leaf: gym.Space) -> str:
    """The one-line refusal of an observation space with a leaf no built-in encoder reads,
    naming the entry and both fixes: drop the entry with a wrapper, or bring an encoder."""
    kind = type(leaf).__name__
    if not path:
        return (
            f"the observation space is a {kind} space: no built-in encoder for {kind} "
            "observations; turn the observations into arrays with a wrapper (env.wrappers), or "
            "pass your own encoder (networks={'encoder': ...}, or algo.encoder = 'module:factory')"
        )
    where = "".join(f"[{k!r}]" for k in path)
    keep = []
    if isinstance(space, gym.spaces.Dict) and len(path) >= 1:
        keep = [k for k in space.spaces if k != path[0]]
    drop = (
        "drop it with env.wrappers = [{path = 'gymnasium.wrappers:FilterObservation', kwargs = "
        f"{{filter_keys = {keep!r}}}}}]"
        if keep
        else "drop it with a wrapper (env.wrappers)"
    )
    return (
        f"the observation entry {where} is a {kind} space: no built-in encoder for {kind} "
        f"observations; {drop}, or pass your own encoder (networks={{'encoder': ...}}, or "
        "algo.encoder = 'module:factory')"
    )


class _Leaf(nn.Module):
    """Encodes one non-container leaf space."""

    def __init__(self, space: gym.Space, images: str, image_features: int) -> None:
        super().__init__()
        self.space = space
        self.image: ImageEncoder | None = None
        if isinstance(space, gym.spaces.Box):
            if images == "cnn" and is_image_space(space):
                self.image = ImageEncoder(space, image_features)
                self.out_dim = self.image.out_dim
            else:
                self.out_dim = int(np.prod(space.shape))
            self.kind = "box"
        elif isinstance(space, gym.spaces.Discrete):
            self.kind, self.out_dim = "discrete", int(space.n)
            self.start = int(space.start)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            self.kind = "multidiscrete"
            self.nvec = [int(n) for n in np.asarray(space.nvec).reshape(-1)]
            self.register_buffer(
                "starts", torch.as_tensor(np.asarray(space.start).reshape(-1), dtype=torch.long)
            )
            self.out_dim = sum(self.nvec)
        elif isinstance(space, gym.spaces.MultiBinary):
            self.kind, self.out_dim = "binary", int(np.prod(space.shape))
        else:
            raise _NoEncoder(
                f"no built-in encoder for {type(space).__name__} observations; pass your own "
                "encoder module (taking the observation, with an out_dim attribute)"
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.image is not None:
            return self.image(x)
        if self.kind == "discrete":
            return F.one_hot(x.long().reshape(-1) - self.start, self.out_dim).float()
        if self.kind == "multidiscrete":
            idx = x.long().reshape(x.shape[0], len(self.nvec)) - self.starts
            return torch.cat(
                [F.one_hot(idx[:, i], n).float() for i, n in enumerate(self.nvec)], dim=1
            )
        # the width spelled out: an empty batch (an update with nothing to bootstrap) too
        return x.reshape(x.shape[0], self.out_dim).float()


class ObsEncoder(nn.Module):
    """One encoder for every gymnasium observation space (see the module docstring).

    Args:
        space: the observation space of one env.
        images: ``"cnn"`` (default) puts image Boxes through :class:`ImageEncoder`; ``"flatten"``
            flattens them like any Box.
        image_features: output width of each image CNN.
    """

    def __init__(self, space: gym.Space, images: str = "cnn", image_features: int = 512) -> None:
        super().__init__()
        if images not in {"cnn", "flatten"}:
            raise ValueError(f"images={images!r}; use 'cnn' or 'flatten'")
        self.space = space
        self.paths: list[tuple[Any, ...]] = []
        leaves: list[_Leaf] = []
        for path, leaf in _leaves(space):
            if path[:1] == (ACTION_MASK_KEY,) and has_action_mask(space):
                continue  # which actions are legal is no feature: policies mask with it
            self.paths.append(path)
            try:
                leaves.append(_Leaf(leaf, images, image_features))
            except _NoEncoder as exc:
                raise _NoEncoder(_no_encoder_message(space, path, leaf)) from exc
        if not leaves:
            raise _NoEncoder(
                f"the observation space {space} has no entries to encode; fix the env so that "
                "its observations hold something"
            )
        self.parts = nn.ModuleList(leaves)
        self.out_dim = sum(p.out_dim for p in leaves)
        self._single = self.paths == [()]

    @property
    def learnable(self) -> bool:
        """Whether the encoder has parameters (a CNN): then it must be trained with a loss."""
        return any(p.requires_grad for p in self.parameters())

    def forward(self, obs: Any) -> torch.Tensor:
        """``obs [B, ...]`` (a tensor, or a nested dict / tuple of them) -> ``[B, out_dim]``."""
        if self._single:
            return self.parts[0](obs)
        out = []
        for path, part in zip(self.paths, self.parts):
            x = obs
            for key in path:
                x = x[key]
            out.append(part(x))
        return torch.cat(out, dim=1)


class FlattenEncoder(ObsEncoder):
    """:class:`ObsEncoder` with images flattened: no parameters, any space."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__(space, images="flatten")


def make_encoder(space: gym.Space, images: str = "cnn", image_features: int = 512) -> ObsEncoder:
    """The default encoder of ``space`` (CNNs for image Boxes unless ``images="flatten"``)."""
    return ObsEncoder(space, images=images, image_features=image_features)


def _leaves(space: gym.Space, prefix: tuple[Any, ...] = ()) -> Sequence[tuple[Any, gym.Space]]:
    """``(path, leaf space)`` of a nested Dict / Tuple space; Dict keys in the space's order,
    Tuple entries by position as the keys ``"0"``, ``"1"``, ..."""
    if isinstance(space, gym.spaces.Dict):
        out: list[tuple[Any, gym.Space]] = []
        for key, sub in space.spaces.items():
            out.extend(_leaves(sub, (*prefix, key)))
        return out
    if isinstance(space, gym.spaces.Tuple):
        out = []
        for i, sub in enumerate(space.spaces):
            out.extend(_leaves(sub, (*prefix, str(i))))
        return out
    return [(prefix, space)]
