"""Replay buffers composed from parts: the buffer shell (``ReplayBuffer``: storage, stacking,
hdf5 files), the shared-ring layout, and the part protocols and core samplers that plugins add to
(layouts, samplers, relabellers, writers).

Builds on ``contracts`` and ``plugins``; never imports ``algo``, ``collect`` or higher layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlblocks._lazy import attach

__all__ = [
    "PARTS",
    "AnnealedSampler",
    "EnvAttachedPart",
    "EpisodeStats",
    "Layout",
    "PrioritySampler",
    "Relabeller",
    "ReplayBuffer",
    "Sampler",
    "SequenceSampler",
    "SharedRing",
    "UniformSampler",
    "Writer",
    "add_in_runs",
    "build_part",
    "resolve_part_names",
]

if TYPE_CHECKING:
    from rlblocks.replay._buffer import ReplayBuffer, add_in_runs
    from rlblocks.replay._layouts import EpisodeStats, SharedRing
    from rlblocks.replay._parts import (
        PARTS,
        AnnealedSampler,
        EnvAttachedPart,
        Layout,
        PrioritySampler,
        Relabeller,
        Sampler,
        SequenceSampler,
        UniformSampler,
        Writer,
        build_part,
        resolve_part_names,
    )

__getattr__, __dir__ = attach(__name__, __file__)
