"""Row access on trees of arrays: an observation (or recurrent state, or policy output) may be an
array or a dict / tuple / Batch nest of arrays, all with the env axis first. The collectors and
the multi-process env backends select and write env rows through these two functions."""

from __future__ import annotations

from typing import Any

from rlblocks.contracts._batch import Batch


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


def tuples_as_dicts(tree: Any) -> Any:
    """The same tree with every tuple replaced by a dict keyed ``"0"``, ``"1"``, ... (Batch and the
    buffers store nests of dicts; a tuple would become one object array). Encoders read entry
    ``i`` of a Tuple observation space as key ``str(i)``."""
    if isinstance(tree, tuple):
        return {str(i): tuples_as_dicts(v) for i, v in enumerate(tree)}
    if isinstance(tree, dict):
        return {k: tuples_as_dicts(v) for k, v in tree.items()}
    return tree


def space_has_tuple(space: Any) -> bool:
    """Whether a gymnasium space holds a Tuple anywhere (checked once, by a new collector)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Tuple):
        return True
    if isinstance(space, gym.spaces.Dict):
        return any(space_has_tuple(s) for s in space.spaces.values())
    return False
