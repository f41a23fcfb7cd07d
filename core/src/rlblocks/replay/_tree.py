"""Nested storage helpers of the replay buffers: paths, leaves and the reserved keys.

A buffer stores every key as one array of shape ``[maxsize, *item_shape]``; nested dicts (for
example ``Dict`` observations) become nested dicts of arrays, addressed by a ``Path`` of keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.contracts import Batch

#: Keys with a meaning to the buffer, in the order they are stored and shown.
RESERVED_KEYS = ("obs", "act", "rew", "terminated", "truncated", "obs_next", "info", "policy")
#: Keys that ``stack_num > 1`` stacks along a new axis 1.
STACKED_KEYS = frozenset({"obs", "obs_next", "info", "policy"})
_RANK = {k: i for i, k in enumerate(RESERVED_KEYS)}

Path = tuple[str, ...]
Tree = dict[str, Any]  # nested dict whose leaves are storage arrays


def _flatten(obj: Any, prefix: Path, out: dict[Path, Any]) -> None:
    """Collect the leaves of a nested dict/Batch as ``{path: value}``; empty dicts and ``None``
    leave nothing."""
    for key, value in obj.items():
        if isinstance(value, np.ndarray):
            out[(*prefix, key)] = value
        elif isinstance(value, Batch | Mapping):
            _flatten(value, (*prefix, key), out)
        elif value is not None:
            out[(*prefix, key)] = value


def _name(path: Path) -> str:
    return "/".join(path)


def _tree_leaves(tree: Tree, prefix: Path = ()) -> list[tuple[Path, np.ndarray]]:
    out: list[tuple[Path, np.ndarray]] = []
    for key, node in tree.items():
        if isinstance(node, dict):
            out.extend(_tree_leaves(node, (*prefix, key)))
        else:
            out.append(((*prefix, key), node))
    return out


def _tree_map(tree: Tree, fn: Any) -> dict[str, Any]:
    """Apply ``fn`` to every storage array; the result is a nested dict (Batch-ready)."""
    return {k: _tree_map(v, fn) if isinstance(v, dict) else fn(v) for k, v in tree.items()}


def _to_batch(tree: Mapping[str, Any]) -> Batch:
    # keyword form: Batch checks all keys against its members in one set operation
    return Batch(**{k: _to_batch(v) if isinstance(v, dict) else v for k, v in tree.items()})


def _storage_dtype(path: Path, value: np.ndarray) -> np.dtype:
    top = path[0]
    if top in ("terminated", "truncated") and len(path) == 1:
        return np.dtype(bool)
    if top == "rew" and len(path) == 1:
        return value.dtype if value.dtype.kind == "f" else np.dtype(np.float64)
    if value.dtype.kind == "U":  # fixed-width text would silently truncate longer strings later
        return np.dtype(object)
    return value.dtype
