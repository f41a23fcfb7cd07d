"""SimBa networks (Lee et al., 2024, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep
RL"): observations normalised with running statistics (:class:`RSNorm`), a linear embedding,
pre-LayerNorm residual MLP blocks (:class:`SimbaBlock`) and a final LayerNorm before the output
layer. The residual path keeps the network close to a linear map of its input while the blocks
add capacity, so wide networks stay easy to train.

``algo.network = "simba"`` swaps these in for the MLPs of an algorithm's default networks;
:func:`~rlblocks.algo.nets.network_body` is the one builder the algorithms call for that
choice.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from rlblocks.algo.nets._running import RunningMeanStd

__all__ = [
    "NETWORKS",
    "SIMBA_DEFAULTS",
    "RSNorm",
    "SimbaBlock",
    "SimbaEncoder",
    "SimbaMLP",
    "simba_encoder",
    "simba_size",
]

#: the network choices of ``algo.network``
NETWORKS = ("mlp", "simba")

#: (width, blocks) of each part when the config leaves them unset: the SimBa paper's SAC setup
#: (actor 1 block of 128, critic 2 blocks of 512); value networks take the critic's
SIMBA_DEFAULTS: dict[str, tuple[int, int]] = {"actor": (128, 1), "critic": (512, 2)}


class RSNorm(RunningMeanStd):
    """Running-statistics normalisation of inputs: ``(x - mean) / sqrt(var + eps)``, clipped to
    ``[-clip, clip]`` (:class:`~rlblocks.algo.RunningMeanStd` called as a layer). The statistics
    are float64 buffers (saved in checkpoints, restored exactly), merged batch by batch in place
    (so a captured CUDA graph that reads them sees the new values), and change only when
    :meth:`update` is called: the policy calls it with the observations of training collects,
    never in tests or gradient steps, so a batch is normalised the same way whenever it is read."""

    def __init__(
        self, shape: tuple[int, ...] = (), epsilon: float = 1e-8, clip: float | None = 10.0
    ) -> None:
        super().__init__(shape, epsilon=epsilon, clip=clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)

class SimbaEncoder(nn.Module):
    """``base`` (an encoder of raw observations without parameters, e.g. the flattening
    :class:`~rlblocks.algo.nets.ObsEncoder`) followed by :class:`RSNorm` over its features;
    ``out_dim`` is the base's. :meth:`observe` merges observations into the statistics."""

    def __init__(self, base: nn.Module, epsilon: float = 1e-8, clip: float | None = 10.0) -> None:
        super().__init__()
        self.base = base
        self.out_dim = int(base.out_dim)
        self.norm = RSNorm((self.out_dim,), epsilon=epsilon, clip=clip)

    def forward(self, obs: Any) -> torch.Tensor:
        return self.norm(self.base(obs))

    @torch.no_grad()
    def observe(self, obs: Any) -> None:
        """Merge raw observations ``obs [N, ...]`` (tensors) into the running statistics."""
        self.norm.update(self.base(obs))


class SimbaBlock(nn.Module):
    """``x + Linear(ReLU(Linear_4w(LayerNorm(x))))``: a pre-LayerNorm residual MLP block with
    an inverted bottleneck four times the width."""

    def __init__(self, width: int, expansion: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, expansion * width)
        self.act = nn.ReLU()
        self.down = nn.Linear(expansion * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class SimbaMLP(nn.Sequential):
    """``Linear(in, width) -> blocks x SimbaBlock -> LayerNorm [-> Linear(width, out)]``.
    Without ``out_dim`` it ends at the LayerNorm (a body for heads of its own); ``out_dim``
    is then ``width``."""

    def __init__(self, in_dim: int, width: int, blocks: int, out_dim: int | None = None) -> None:
        if width < 1 or blocks < 0:
            raise ValueError(
                f"a SimBa network needs width >= 1 and blocks >= 0, got {width}, {blocks}"
            )
        layers: list[nn.Module] = [nn.Linear(in_dim, width)]
        layers += [SimbaBlock(width) for _ in range(blocks)]
        layers.append(nn.LayerNorm(width))
        if out_dim is not None:
            layers.append(nn.Linear(width, out_dim))
        super().__init__(*layers)
        self.out_dim = out_dim if out_dim is not None else width


def simba_size(config: Any, part: str) -> tuple[int, int]:
    """``(width, blocks)`` of ``part`` (``"actor"`` or ``"critic"``): the config's
    ``network_width`` / ``network_blocks`` where set, else :data:`SIMBA_DEFAULTS`."""
    width, blocks = SIMBA_DEFAULTS[part]
    own_width = getattr(config, "network_width", None)
    own_blocks = getattr(config, "network_blocks", None)
    return (
        int(own_width) if own_width is not None else width,
        int(own_blocks) if own_blocks is not None else blocks,
    )


def simba_encoder(encoder: nn.Module) -> nn.Module:
    """``encoder`` with :class:`RSNorm` over its features when it has no parameters (flat
    observations); a learning encoder (an image CNN) is returned as it is: normalising its
    moving features would chase a target that the gradient steps move."""
    if next(encoder.parameters(), None) is not None:
        return encoder
    return SimbaEncoder(encoder)
