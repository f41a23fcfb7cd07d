"""Prioritized replay for rlblocks: a sampler (``sampler="prioritized"``; ``buffer="prioritized"``
is it on the per-env layout).

The classes live in :mod:`rlblocks_buffer_prioritized.buffer`; this module stays light so that
listing plugins never imports numpy.
"""

from typing import Any

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampler", "PrioritizedVectorReplayBuffer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_prioritized import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
