"""The cached writer for rlblocks (``writer="cached"``): only complete episodes enter the buffer.

The classes live in :mod:`rlblocks_buffer_cached.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["CachedReplayBuffer", "CachedWriter"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_cached import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
