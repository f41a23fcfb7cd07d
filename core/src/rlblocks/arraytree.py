"""Row access on trees of arrays: an observation (or recurrent state, or policy output) may be an
array or a dict / tuple / Batch nest of arrays, all with the env axis first. The collectors and
the multi-process env backends select and write env rows through these two functions."""

from __future__ import annotations

from typing import Any

from rlblocks.batch import Batch


def take_rows(tree: Any, rows: Any) -> Any:
    """``tree[rows]`` applied to every array of the tree (dicts stay dicts, tuples tuples)."""
    if isinstance(tree, dict):
        return {k: take_rows(v, rows) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(take_rows(v, rows) for v in tree)
    return tree[rows]  # arrays, tensors and Batches index every leaf themselves


def put_rows(tree: Any, rows: Any, value: Any) -> None:
    """``tree[rows] = value`` for every array of the tree, in place (a None tree is left alone)."""
    if tree is None:
        return
    if isinstance(tree, dict | Batch):
        for key in tree.keys():  # noqa: SIM118 - iterating a Batch yields rows, not keys
            put_rows(tree[key], rows, value[key])
    elif isinstance(tree, tuple):
        for sub, v in zip(tree, value):
            put_rows(sub, rows, v)
    else:
        tree[rows] = value
