"""Cached replay buffer for rlblocks (``buffer="cached"``): only complete episodes are sampled.

The class lives in :mod:`rlblocks_buffer_cached.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["CachedReplayBuffer"]


def __getattr__(name: str) -> Any:
    if name == "CachedReplayBuffer":
        from rlblocks_buffer_cached.buffer import CachedReplayBuffer

        return CachedReplayBuffer
    raise AttributeError(name)
