"""Seeding and random state of a whole run: every generator seeded from the run's seed, the
global streams a checkpoint saves and a resume restores, and flushed denormals."""

from __future__ import annotations

import contextlib
import random
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch


# -- runs ---------------------------------------------------------------------------------------
def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _flushing_denormals() -> bool:
    """Whether CPU float arithmetic flushes subnormal numbers to zero right now."""
    tiny = torch.full((1,), 1e-39, dtype=torch.float32)  # subnormal in float32
    return float(tiny.mul(2.0)) == 0.0


@contextlib.contextmanager
def denormals_flushed(enabled: bool = True) -> Iterator[None]:
    """Inside, CPU arithmetic treats subnormal floats as zero (``run.flush_denormals``); the
    setting the process had is restored after. Nothing changes where the CPU cannot do it."""
    if not enabled or _flushing_denormals() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def _numpy_rng_state() -> dict[str, Any]:
    """numpy's global generator state with plain lists (checkpoints hold no numpy objects)."""
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {"name": name, "key": key.tolist(), "pos": int(pos), "has_gauss": int(has_gauss),
            "cached": float(cached)}  # fmt: skip


def _set_numpy_rng_state(state: Mapping[str, Any]) -> None:
    np.random.set_state((
        state["name"], np.asarray(state["key"], dtype=np.uint32), state["pos"],
        state["has_gauss"], state["cached"],
    ))  # fmt: skip


def _set_cuda_rng_state(states: list[torch.Tensor] | None) -> None:
    """Continue the saved GPU generators (one state per device the run had initialised). A run
    saved on more GPUs than this machine has, or resumed without one, draws afresh from the
    seed on the GPUs it lacks, and says so."""
    if not states:
        return
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for index, state in enumerate(states[:have]):
        torch.cuda.set_rng_state(state, index)
    if have < len(states):
        _warn_stderr(
            f"the checkpoint holds the random streams of {len(states)} GPU(s) and this machine "
            f"has {have}: the streams of the missing GPUs are not continued"
        )


def _warn_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
