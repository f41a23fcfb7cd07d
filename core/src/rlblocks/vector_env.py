"""Lifecycle shared by vector-env backends: context manager, ``len`` and close on collection.

A backend subclasses :class:`VectorEnvBase` and defines ``num_envs`` and an idempotent ``close()``;
``with backend(...) as envs:`` then closes it on exit, and a backend dropped without ``close()``
closes itself when collected (so no worker process or env outlives it).
"""

from __future__ import annotations

import contextlib
from typing import Self

__all__ = ["VectorEnvBase"]


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
