"""Lifecycle shared by vector-env backends: context manager, ``len`` and close on collection.

A backend subclasses :class:`VectorEnvBase` and defines ``num_envs`` and an idempotent ``close()``;
``with backend(...) as envs:`` then closes it on exit, and a backend dropped without ``close()``
closes itself when collected (so no worker process or env outlives it).

Also here: how every backend stacks observations whose space has leaves that are not fixed-shape
arrays (``Text``, ``Graph``, ``Sequence``): such a leaf comes back as a 1-D object array with
one entry per env, so that rows can be selected and written like any other leaf (a tuple of
strings, gymnasium's own batch of a ``Text`` space, would read as a ``Tuple`` observation), and
the one-line report of an observation whose leaf shape disagrees with its space.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "VectorEnvBase",
    "as_env_ids",
    "empty_observations",
    "has_object_leaves",
    "observation_mismatch",
    "observation_value_problem",
    "stack_observations",
    "step_value_problem",
]


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


def _array_leaf(space: gym.Space) -> bool:
    """Whether ``space`` is a leaf with a fixed shape and dtype (stacks into one array)."""
    import gymnasium as gym

    return isinstance(
        space,
        gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary,
    )


def _children(space: gym.Space) -> list[tuple[Any, gym.Space]] | None:
    """``[(key, subspace)]`` of a Dict or Tuple space; None for a leaf."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.items())
    if isinstance(space, gym.spaces.Tuple):
        return list(enumerate(space.spaces))
    return None


def has_object_leaves(space: gym.Space) -> bool:
    """Whether ``space`` (possibly a Dict/Tuple nest) has a leaf that is not a fixed-shape array
    (Text, Graph, Sequence...): its observations stack as object arrays."""
    children = _children(space)
    if children is not None:
        return any(has_object_leaves(sub) for _, sub in children)
    return not _array_leaf(space)


def _object_rows(items: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    for k, item in enumerate(items):  # one by one: numpy would unpack a sequence item
        out[k] = item
    return out


def stack_observations(space: gym.Space, items: Sequence[Any]) -> Any:
    """One observation per env stacked into the batch layout every backend returns: arrays of
    ``[len(items), *shape]`` for array leaves (as gymnasium stacks them), 1-D object arrays for
    the other leaves, nested in dicts and tuples like ``space``."""
    children = _children(space)
    if children is not None:
        stacked = [(k, stack_observations(sub, [o[k] for o in items])) for k, sub in children]
        return dict(stacked) if isinstance(space.spaces, dict) else tuple(v for _, v in stacked)
    if _array_leaf(space):
        from gymnasium.vector.utils import concatenate, create_empty_array

        out = create_empty_array(space, n=len(items), fn=np.empty)
        return concatenate(space, items, out)
    return _object_rows(items)


def empty_observations(space: gym.Space, n: int) -> Any:
    """A zeroed batch of ``n`` observations in the layout of :func:`stack_observations` (object
    leaves hold None): room for a backend to keep each env's last observation."""
    children = _children(space)
    if children is not None:
        made = [(k, empty_observations(sub, n)) for k, sub in children]
        return dict(made) if isinstance(space.spaces, dict) else tuple(v for _, v in made)
    if _array_leaf(space):
        return np.zeros((n, *space.shape), dtype=space.dtype)
    return np.empty(n, dtype=object)


def _leaf_shapes(space: gym.Space, path: tuple[Any, ...] = ()) -> list[tuple[tuple, tuple]]:
    children = _children(space)
    if children is not None:
        return [leaf for k, sub in children for leaf in _leaf_shapes(sub, (*path, k))]
    return [(path, tuple(space.shape))] if _array_leaf(space) else []


def observation_mismatch(
    space: gym.Space, items: Sequence[Any], env_ids: Sequence[int]
) -> str | None:
    """The first observation leaf (env ``env_ids[j]`` returned ``items[j]``) whose shape is not
    the one ``space`` says, described in one line naming the env, the leaf path, both shapes and
    the fix; None when every array leaf has its shape. Meant for the error path: a backend calls
    it once stacking failed, so the usual step pays nothing for it."""
    leaves = _leaf_shapes(space)
    for env_id, obs in zip(env_ids, items, strict=False):
        for path, shape in leaves:
            leaf = obs
            try:
                for key in path:
                    leaf = leaf[key]
            except (KeyError, IndexError, TypeError):
                where = "".join(f"[{k!r}]" for k in path)
                return (
                    f"env {env_id} returned an observation without the entry {where} its "
                    f"observation space has; fix the env or a wrapper so that they agree"
                )
            got = tuple(np.shape(leaf))
            if got != shape:
                where = "".join(f"[{k!r}]" for k in path)
                return (
                    f"env {env_id} returned an observation{where} of shape {got}, but its "
                    f"observation space says {shape}; fix the env or a wrapper so that they agree"
                )
    return None


def _is_reward(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return -(2**1023) < value < 2**1023  # beyond float64: no number a run can add up
    if isinstance(value, float | bool | np.integer | np.floating):
        return True
    return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf"


def _is_flag(value: Any) -> bool:
    if isinstance(value, bool | np.bool_):
        return True
    if isinstance(value, int | np.integer):
        return value in (0, 1)
    return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "b"


def _shown(value: Any) -> str:
    text = " ".join(repr(value).split())  # one line, whatever numpy's repr wraps
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{text} ({type(value).__name__})"


def step_value_problem(env_id: int, reward: Any, terminated: Any, truncated: Any) -> str | None:
    """What is wrong with the reward and flags env ``env_id`` returned from ``step()``, in one
    line naming the env, the value and the fix; None when the reward is one number and the
    flags are bools (or 0 / 1). A string reward would otherwise be read as its number and a
    non-empty string flag as True, and an array of either would fail deep inside a backend.
    Backends call it on each env's first step (the types an env returns do not change), so the
    usual step pays nothing."""
    if not _is_reward(reward):
        return (
            f"env {env_id} returned the reward {_shown(reward)} from step(); a reward is one "
            "number (a float, an int or a numpy scalar): fix the env or wrap it (env.wrappers)"
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not _is_flag(flag):
            return (
                f"env {env_id} returned {name}={_shown(flag)} from step(); it must be a bool "
                "(True or False): fix the env or wrap it (env.wrappers)"
            )
    return None


def observation_value_problem(
    space: gym.Space, items: Sequence[Any], env_ids: Sequence[int]
) -> str:
    """The first observation (env ``env_ids[j]`` returned ``items[j]``) whose values do not fit
    ``space`` although its shape does (strings in a Box, None, numbers beyond the dtype), in one
    line naming the env, the value and the fix. For the error path, after stacking failed."""
    for env_id, obs in zip(env_ids, items, strict=False):
        try:
            stack_observations(space, [obs])
        except Exception as exc:  # numpy's and gymnasium's own words for what does not fit
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            shown = " ".join(repr(obs).split())
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            return (
                f"env {env_id} returned the observation {shown}, which does not fit its "
                f"observation space {space} ({text}); fix the env or a wrapper so that they agree"
            )
    return f"an observation does not fit the observation space {space}; fix the env or a wrapper"
