"""Trajectory views: a policy names the columns it needs, with time shifts, and rlblocks builds
exactly those — from per-env histories while acting, from the buffer's episode links while
training (RLlib's view requirements).

A policy declares ``view_requirements``, a dict from the name a column gets in its batches to a
:class:`ViewRequirement`::

    policy.view_requirements = {
        "prev_act": ViewRequirement("act", shift=-1),         # a_{t-1}
        "prev_rew": ViewRequirement("rew", shift=-1),         # r_{t-1}
        "obs_stack": ViewRequirement("obs", shift="-3:0"),    # o_{t-3..t}, new axis 1
        "next_act": ViewRequirement("act", shift=1, used_for_acting=False),
    }

Time ``t`` is a row of the buffer (``obs``, ``act``, ``rew`` of one step). Steps before the
episode's first step or after its last stored step are zeros, so a view never mixes episodes.
While acting only the past is known: ``obs`` with shifts <= 0, ``act`` and ``rew`` with shifts
<= -1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from attrs import field, frozen

from rlblocks.batch import Batch
from rlblocks.errors import ConfigError

#: Columns the collector knows while acting, and the most recent shift it has for each.
_ACTING_COLUMNS = {"obs": 0, "act": -1, "rew": -1}


def parse_shift(shift: int | Sequence[int] | str) -> tuple[tuple[int, ...], bool]:
    """``(offsets, ranged)``: an int gives one offset and no time axis; a list or a range string
    ``"-3:0"`` (both ends included) gives several offsets stacked on a new axis 1."""
    if isinstance(shift, bool):
        raise ConfigError(f"shift={shift!r}: use an int, a list of ints or a range like '-3:0'")
    if isinstance(shift, int | np.integer):
        return (int(shift),), False
    if isinstance(shift, str):
        lo, sep, hi = shift.partition(":")
        try:
            start, stop = int(lo), int(hi)
        except ValueError:
            start = stop = 0
            sep = ""
        if not sep or start > stop:
            raise ConfigError(
                f"shift={shift!r} is not a range; write 'first:last' with first <= last, "
                "e.g. '-3:0' for the last four steps"
            )
        return tuple(range(start, stop + 1)), True
    offsets = tuple(int(s) for s in shift)
    if not offsets:
        raise ConfigError("shift=[] names no time step; give at least one offset")
    return offsets, True


@frozen
class ViewRequirement:
    """One column of a policy's batches: ``data_col`` (default: the view's own name) read at the
    time offsets ``shift`` relative to each step."""

    data_col: str | None = None
    """The stored column to read (``obs``, ``act``, ``rew``, ``obs_next``, ``policy.logp``...)."""
    shift: int | tuple[int, ...] | str = field(
        default=0, converter=lambda s: tuple(s) if isinstance(s, list) else s
    )
    """Offset(s): ``-1`` the previous step, ``1`` the next, ``[-2, -1]`` or ``"-3:0"`` several."""
    space: gym.Space | None = None
    """The column's space when it is not the env's (e.g. a float64 reward column): gives the
    shape and dtype of acting views, zeros before anything was seen. None: the env's observation
    or action space (float32 scalars for rewards)."""
    used_for_training: bool = True
    """Build this view for ``learn`` (from the buffer)."""
    used_for_acting: bool = True
    """Build this view for ``forward`` while collecting (past offsets only)."""

    def __attrs_post_init__(self) -> None:
        parse_shift(self.shift)  # fail at construction, not in the loop

    def column(self, name: str) -> str:
        return self.data_col or name

    @property
    def offsets(self) -> tuple[int, ...]:
        return parse_shift(self.shift)[0]

    @property
    def ranged(self) -> bool:
        return parse_shift(self.shift)[1]


# -- training: views from the buffer ------------------------------------------------------------
def shifted_index(buffer: Any, indices: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Follow the buffer's episode links ``|shift|`` steps back (``prev``) or forward (``next``).

    Returns the reached indices and a mask of those still inside the episode: a walk that hits
    the episode's first step (going back) or its last stored step (going forward) is invalid."""
    cur = np.asarray(indices)
    valid = np.ones(cur.shape, dtype=bool)
    step = buffer.prev if shift < 0 else buffer.next
    for _ in range(abs(shift)):
        nxt = np.asarray(step(cur))
        valid &= nxt != cur
        cur = nxt
    return cur, valid


def _read(buffer: Any, index: np.ndarray, column: str) -> Any:
    top, _, rest = column.partition(".")
    value = buffer.get(index, top, stack_num=1)
    if value is None:
        raise ConfigError(
            f"view column {column!r}: the buffer stores no {top!r}; stored keys: "
            f"{', '.join(buffer.keys()) if hasattr(buffer, 'keys') else 'unknown'}"
        )
    for part in rest.split(".") if rest else ():
        value = value[part]
    return value


def _zero_rows(value: Any, rows: np.ndarray) -> Any:
    if isinstance(value, Batch):
        for key in value.keys():  # noqa: SIM118 - iterating a Batch yields rows
            value[key] = _zero_rows(value[key], rows)
        return value
    value = np.array(value, copy=True)
    value[rows] = 0
    return value


def _stack(values: list[Any]) -> Any:
    if isinstance(values[0], Batch):
        return Batch.stack(values, axis=1)
    return np.stack(values, axis=1)


def training_views(
    buffer: Any, indices: np.ndarray, requirements: Mapping[str, ViewRequirement]
) -> dict[str, Any]:
    """The training-side views for sampled ``indices``: each ``[B, ...]`` (one offset) or
    ``[B, len(offsets), ...]`` (a list or range), zero where the offset leaves the episode."""
    out: dict[str, Any] = {}
    for name, req in requirements.items():
        column, offsets = req.column(name), req.offsets
        if not req.used_for_training or (column == name and offsets == (0,) and not req.ranged):
            continue
        parts = []
        for shift in offsets:
            idx, valid = shifted_index(buffer, indices, shift)
            value = _read(buffer, idx, column)
            if not valid.all():
                value = _zero_rows(value, np.flatnonzero(~valid))
            parts.append(value)
        out[name] = _stack(parts) if req.ranged else parts[0]
    return out


# -- acting: per-env histories -----------------------------------------------------------------
class ActingViews:
    """Keeps, per env, the recent ``obs``, ``act`` and ``rew`` that a policy's acting views need,
    and builds those views for any subset of envs. Histories restart (zeros) with each episode.

    History arrays are ``[num_envs, K, *shape]`` with the newest entry last: for ``obs`` the
    newest is the current observation, for ``act``/``rew`` the previous step's.
    """

    def __init__(
        self,
        requirements: Mapping[str, ViewRequirement],
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
    ) -> None:
        self.views: dict[str, tuple[str, tuple[int, ...], bool]] = {}
        depth: dict[str, int] = {}
        declared: dict[str, gym.Space] = {}  # a requirement's own space wins over the env's
        for name, req in requirements.items():
            column, offsets = req.column(name), req.offsets
            if not req.used_for_acting or (column == name == "obs" and offsets == (0,)):
                continue
            newest = _ACTING_COLUMNS.get(column)
            if newest is None or max(offsets) > newest:
                raise ConfigError(
                    f"view {name!r} ({column} at {req.shift}) cannot be built while acting: "
                    "only obs (shift <= 0), act and rew (shift <= -1) are known then; set "
                    "used_for_acting=False to use it for training only"
                )
            self.views[name] = (column, offsets, req.ranged)
            depth[column] = max(depth.get(column, 0), newest - min(offsets) + 1)
            if req.space is not None:
                if declared.get(column, req.space) != req.space:
                    raise ConfigError(
                        f"views of {column!r} declare different spaces ({declared[column]} and "
                        f"{req.space} for {name!r}); one column has one space"
                    )
                declared[column] = req.space
        spaces = {"obs": observation_space, "act": action_space, "rew": None, **declared}
        self.history: dict[str, np.ndarray] = {}
        for column, k in depth.items():
            space = spaces[column]
            shape = () if space is None else space.shape or ()
            dtype = np.float32 if space is None else space.dtype
            if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple) or shape is None:
                raise ConfigError(f"acting views of {column!r} need a Box or discrete space")
            self.history[column] = np.zeros((num_envs, k, *shape), dtype=dtype)

    def __bool__(self) -> bool:
        return bool(self.views)

    def begin_episode(self, env_ids: np.ndarray, obs: Any) -> None:
        """Forget the history of ``env_ids`` and start it from their first observation."""
        for column, hist in self.history.items():
            hist[env_ids] = 0
            if column == "obs":
                hist[env_ids, -1] = obs

    def record(self, env_ids: np.ndarray, act: Any, rew: Any, obs_next: Any) -> None:
        """Append one step of ``env_ids``: the action taken, its reward and the new observation."""
        new = {"obs": obs_next, "act": act, "rew": rew}
        for column, hist in self.history.items():
            rows = hist[env_ids]
            rows[:, :-1] = rows[:, 1:]
            rows[:, -1] = new[column]
            hist[env_ids] = rows

    def build(self, env_ids: np.ndarray) -> dict[str, np.ndarray]:
        """The acting views of ``env_ids``."""
        out = {}
        for name, (column, offsets, ranged) in self.views.items():
            hist = self.history[column]
            newest = _ACTING_COLUMNS[column]
            cols = [hist.shape[1] - 1 - (newest - s) for s in offsets]
            rows = hist[env_ids]
            out[name] = rows[:, cols] if ranged else rows[:, cols[0]]
        return out
