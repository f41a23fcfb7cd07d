"""Lifecycle shared by vector-env backends: context manager, ``len`` and close on collection.

A backend subclasses :class:`VectorEnvBase` and defines ``num_envs`` and an idempotent ``close()``;
``with backend(...) as envs:`` then closes it on exit, and a backend dropped without ``close()``
closes itself when collected (so no worker process or env outlives it).
"""

from __future__ import annotations

import contextlib
from typing import Any, Self

import numpy as np

__all__ = ["VectorEnvBase"]


def as_env_ids(env_ids: Any, num_envs: int) -> np.ndarray:
    """``env_ids`` as a checked int64 array for a vector env of ``num_envs``: whole numbers
    (not a boolean mask, not floats), each env once, in range, at least one. Every backend
    refuses the same things with the same words."""
    ids = np.asarray(env_ids)
    if ids.dtype == bool:
        raise TypeError(
            f"env_ids is a boolean mask {ids.tolist()}; pass the ids of the envs "
            "(np.flatnonzero(mask))"
        )
    if ids.size and ids.dtype.kind not in "iu":
        raise TypeError(f"env_ids must be whole numbers, got {ids.tolist()} ({ids.dtype})")
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    if not ids.size:
        raise ValueError("env_ids is empty; name at least one env (None: every env)")
    # one comparison finds both: negative ids wrap to huge unsigned values
    if np.count_nonzero(ids.view(np.uint64) >= num_envs):
        raise IndexError(f"env_ids {ids.tolist()} out of range for {num_envs} envs")
    if len(ids) > 1 and np.count_nonzero(np.bincount(ids) > 1):
        raise ValueError(f"env_ids {ids.tolist()} name an env twice")
    return ids


class VectorEnvBase:
    """Context manager, ``len`` and close-on-collection for a vector env."""

    num_envs: int

    def close(self) -> None:  # pragma: no cover - every backend defines it
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_envs

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
