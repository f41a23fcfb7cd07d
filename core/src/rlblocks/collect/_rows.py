"""The per-env row helpers the collectors share (and collectors of other env families, such as
the multi-agent plugin's, build on): empty and zeroed per-env storage, recurrent-state resets at
episode ends, the rows a restarted env worker made up, numpy conversion of policy outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlblocks.contracts import Batch

#: no env ids (read-only)
NO_IDS = np.zeros(0, dtype=np.int64)
NO_IDS.flags.writeable = False
vdot = np.vdot
"""``np.vdot``: the sum of squares of a step's rewards is finite exactly when every reward is."""


def rows_like(tree: Any, n: int) -> Any:
    """Empty per-env storage ``[n, ...]`` shaped like one batch ``tree`` (array or dict tree)."""
    if isinstance(tree, dict):
        return {k: rows_like(v, n) for k, v in tree.items()}
    return np.empty((n, *tree.shape[1:]), dtype=tree.dtype)


def rows_like_state(state: Any, n: int) -> Any:
    """Zeroed per-env recurrent state ``[n, ...]`` shaped like one batch of ``state``."""
    if isinstance(state, torch.Tensor):
        return torch.zeros((n, *state.shape[1:]), dtype=state.dtype, device=state.device)
    if isinstance(state, dict | Batch):
        return {k: rows_like_state(v, n) for k, v in state.items()}
    state = np.asarray(state)
    return np.zeros((n, *state.shape[1:]), dtype=state.dtype)


def reset_state_rows(state: Any, rows: np.ndarray) -> Any:
    """Zero the recurrent state of finished envs (tensor, array, dict or Batch of them)."""
    if state is None:
        return None
    if isinstance(state, torch.Tensor | np.ndarray):
        state[rows] = 0
        return state
    if isinstance(state, dict | Batch):
        for key in list(state.keys()):
            state[key] = reset_state_rows(state[key], rows)
        return state
    raise TypeError(f"cannot reset recurrent state of type {type(state).__name__}")


def restarted_rows(infos: Any) -> np.ndarray:
    """Rows of one step's infos that a restarted env worker made up (``env_worker_restarted``),
    from a list of per-env dicts or gymnasium's dict of arrays."""
    if isinstance(infos, Mapping):
        mask = infos.get("_env_worker_restarted")
        return NO_IDS if mask is None else np.flatnonzero(mask)
    try:
        return np.asarray(
            [i for i, info in enumerate(infos) if "env_worker_restarted" in info], dtype=np.int64
        )
    except TypeError:  # infos of another form: nothing to recognise
        return NO_IDS


def to_numpy(x: Any) -> np.ndarray:
    if type(x) is np.ndarray:
        return x
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def to_numpy_tree(x: Any) -> Any:
    if isinstance(x, dict | Batch):
        return {k: to_numpy_tree(v) for k, v in x.items()}
    return to_numpy(x)
