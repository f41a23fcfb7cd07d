"""Hindsight experience replay for rlblocks (``relabel="her"``): a relabeller part that gives
sampled transitions goals from their episode's future.

The classes live in :mod:`rlblocks_buffer_her.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["HERReplayBuffer", "HERVectorReplayBuffer", "HindsightRelabeller", "RelabelledView"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_her import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
