"""Named statistics of gradient steps, gathered without copying each value to the host.

``learn`` returns a dict of 0-d tensors (or floats); the trainer collects them here and turns them
into means only when it logs, so a GPU update never waits on a ``.item()``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["StatsAccumulator"]


class StatsAccumulator:
    """Collect ``{name: value}`` records; :meth:`means` averages each name over the records that
    had it, in one device-to-host copy per name."""

    def __init__(self) -> None:
        self._values: dict[str, list[float | torch.Tensor]] = {}

    def add(self, stats: Mapping[str, float | int | torch.Tensor]) -> None:
        for key, value in stats.items():
            if isinstance(value, torch.Tensor):
                value = value.detach()
            self._values.setdefault(key, []).append(value)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return bool(self._values)

    def means(self) -> dict[str, float]:
        """The mean of every name; clears the records."""
        out: dict[str, float] = {}
        for key, values in self._values.items():
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            total = sum(float(v) for v in values if not isinstance(v, torch.Tensor))
            if tensors:
                total += float(torch.stack([t.float().reshape(()) for t in tensors]).sum())
            out[key] = total / len(values)
        self._values.clear()
        return out
