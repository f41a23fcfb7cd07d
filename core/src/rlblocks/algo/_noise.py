"""Exploration noise for deterministic continuous policies (DDPG, TD3).

Noise is added in the network's action units (``[-1, 1]`` before the policy's ``map_action``
scales to the env's bounds), so one ``sigma`` suits every env. Each process has its own numpy
generator, seeded by the policy's ``seed``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["GaussianNoise", "OUNoise", "make_noise"]


class GaussianNoise:
    """Independent ``N(0, sigma^2)`` per action dimension and step (TD3's exploration)."""

    def __init__(self, sigma: float = 0.1) -> None:
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma = float(sigma)

    def __call__(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, self.sigma, size=shape).astype(np.float32)

    def reset(self) -> None:
        """Gaussian noise has no state."""


class OUNoise:
    """Ornstein-Uhlenbeck noise, temporally correlated (the DDPG paper's exploration)::

        x <- x + theta * (mu - x) * dt + sigma * sqrt(dt) * N(0, 1)

    The process state has one row per env of the batch it is asked for; a batch of another
    shape (a different number of envs) starts a new process.
    """

    def __init__(
        self, sigma: float = 0.2, theta: float = 0.15, dt: float = 1e-2, mu: float = 0.0
    ) -> None:
        if sigma < 0 or theta < 0 or dt <= 0:
            raise ValueError("OU noise needs sigma >= 0, theta >= 0 and dt > 0")
        self.sigma, self.theta, self.dt, self.mu = float(sigma), float(theta), float(dt), float(mu)
        self._x: np.ndarray | None = None

    def __call__(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        if self._x is None or self._x.shape != shape:
            self._x = np.full(shape, self.mu, dtype=np.float64)
        x = self._x
        x += self.theta * (self.mu - x) * self.dt + self.sigma * np.sqrt(self.dt) * rng.normal(
            size=shape
        )
        return x.astype(np.float32)

    def reset(self) -> None:
        """Restart the process at ``mu``."""
        self._x = None

    def state_dict(self) -> dict[str, Any]:
        """The process state (a tensor: checkpoints hold no numpy objects)."""
        import torch

        return {"x": None if self._x is None else torch.from_numpy(self._x.copy())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        x = state.get("x")
        self._x = None if x is None else np.asarray(x, dtype=np.float64).copy()


def make_noise(kind: str, sigma: float) -> GaussianNoise | OUNoise:
    """Exploration noise by name: ``gaussian`` or ``ou``."""
    if kind == "gaussian":
        return GaussianNoise(sigma)
    if kind == "ou":
        return OUNoise(sigma)
    raise ValueError(f"unknown exploration noise {kind!r}; use 'gaussian' or 'ou'")
