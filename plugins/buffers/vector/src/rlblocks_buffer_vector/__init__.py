"""The per-env replay layout for rlblocks (``buffer="vector"``): one circular sub-buffer per env.

The classes live in :mod:`rlblocks_buffer_vector.buffer`; this module stays light so that listing
plugins never imports numpy.
"""

from typing import Any

__all__ = ["PerEnvLayout", "VectorReplayBuffer"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlblocks_buffer_vector import buffer

        return getattr(buffer, name)
    raise AttributeError(name)
