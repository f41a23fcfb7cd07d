"""Hindsight experience replay for rlblocks (``buffer="her"``): goal relabelling on sample.

The classes live in :mod:`rlblocks_buffer_her.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["HERReplayBuffer", "HERSampling", "HERVectorReplayBuffer", "RelabelledView"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_her import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
