"""Prioritized replay for rlblocks (``buffer="prioritized"``).

The classes live in :mod:`rlblocks_buffer_prioritized.buffer`; this module stays light so that
listing plugins never imports numpy.
"""

from typing import Any

__all__ = ["PrioritizedReplayBuffer", "PrioritizedSampling", "PrioritizedVectorReplayBuffer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_prioritized import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
