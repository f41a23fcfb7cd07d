"""Vector replay buffer for rlblocks (``buffer="vector"``): one circular sub-buffer per env.

The class lives in :mod:`rlblocks_buffer_vector.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["VectorReplayBuffer"]


def __getattr__(name: str) -> Any:
    if name == "VectorReplayBuffer":
        from rlblocks_buffer_vector.buffer import VectorReplayBuffer

        return VectorReplayBuffer
    raise AttributeError(name)
