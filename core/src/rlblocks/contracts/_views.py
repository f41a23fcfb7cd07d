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
episode's first step or after its last stored step are zeros (or, with ``pad="edge"``, that
first or last step repeated, as frame stacks usually are), so a view never mixes episodes.
Observations go one step further: ``obs`` at ``t + k`` (``k > 0``) is the ``obs_next`` of step
``t + k - 1``, so ``ViewRequirement("obs", shift=1)`` is RLlib's next-observation view, the
observation an episode ended with (terminal or truncated) included.
While acting only the past is known: ``obs`` with shifts <= 0, ``act`` and ``rew`` with shifts
<= -1. A view of a Dict observation is a dict of per-key views, and ``"obs.KEY"`` views one key.

Training sees what acting saw. A view used for both is written into the buffer with its step
(key ``view_<name>``, see :func:`stored_key`) exactly as the policy received it, and training
reads it back instead of walking episode links. Links alone would be wrong wherever the buffer no
longer holds an episode's earlier steps: after the on-policy trainer clears the buffer between
updates (episodes continue into the next collect) and after a ring buffer overwrote an episode's
first steps; they would show zeros where the policy saw real history. The price is one stored
copy of each such view per step (small for previous actions and rewards; ``k`` observations per
step for a ``k``-frame observation stack). Views used only for training (future shifts, other
columns) follow the links.

A view's values have the dtype (and per-step shape) of its :attr:`ViewRequirement.space`, acting
and training alike.

In multi-agent runs a view is, by default, the viewing agent's own history (its slot's chain of
steps). :attr:`ViewRequirement.agents` asks for other agents' data in the same env episode
instead (``"others"``, ``"all"`` or agent names): the multi-agent collector builds such a view
``[B, n_agents, ...]`` with a presence mask under :func:`presence_key` and stores both with the
step, for acting and training alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from attrs import field, frozen

from rlblocks.contracts._batch import Batch
from rlblocks.contracts._errors import ConfigError

#: Columns the collector knows while acting, and the most recent shift it has for each.
_ACTING_COLUMNS = {"obs": 0, "act": -1, "rew": -1}
#: What a reward view is when its requirement declares no space.
_REWARD_SPACE = gym.spaces.Box(-np.inf, np.inf, (), np.float32)
#: Suffix of the history of edge-padded views of a column (``obs@edge``).
_EDGE = "@edge"
#: Prefix of the buffer keys that hold acting views stored with their step.
STORED_PREFIX = "view_"
#: :attr:`ViewRequirement.agents` values that name no agent: every agent but the viewing one,
#: and every agent (the viewing one included).
AGENTS_OTHERS, AGENTS_ALL = "others", "all"


def _agents_value(value: Any) -> str | tuple[str, ...] | None:
    """``ViewRequirement.agents`` as stored: None, ``"others"``, ``"all"`` or a tuple of agent
    names (or fnmatch patterns); anything else is a one-line ConfigError."""
    if value is None or value in (AGENTS_OTHERS, AGENTS_ALL):
        return value
    if isinstance(value, str):
        raise ConfigError(
            f"ViewRequirement.agents={value!r}: use 'others', 'all' or a list of agent names "
            f"(or patterns such as 'adversary_*'), e.g. agents=[{value!r}] for one agent"
        )
    if isinstance(value, Sequence) and value and all(isinstance(a, str) and a for a in value):
        return tuple(value)
    raise ConfigError(
        f"ViewRequirement.agents={value!r}: use 'others', 'all' or a non-empty list of agent "
        "names (or patterns such as 'adversary_*')"
    )


def presence_key(name: str) -> str:
    """The batch key of the presence mask that comes with the view ``name`` of other agents:
    True where that agent acted at that step (its entries are zeros where False)."""
    return name + "_present"


def _default_space(
    column: str, observation_space: gym.Space | None, action_space: gym.Space | None
) -> gym.Space | None:
    """The space a column's views have when their requirement declares none; a key path into a
    Dict observation (``obs.image``) has that key's space."""
    top, _, rest = column.partition(".")
    space = {"obs": observation_space, "act": action_space, "rew": _REWARD_SPACE}.get(top)
    for part in rest.split(".") if rest else ():
        if not isinstance(space, gym.spaces.Dict) or part not in space.spaces:
            return None  # not a key of a Dict space: values as stored
        space = space.spaces[part]
    return space


def _history(space: gym.Space | None, num_envs: int, depth: int, column: str) -> Any:
    """Zeroed ``[num_envs, depth, *shape]`` history for one column; a Dict space gets a dict of
    them, one per key (nested Dicts nest)."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _history(sub, num_envs, depth, f"{column}.{k}") for k, sub in space.items()}
    if space is None or isinstance(space, gym.spaces.Tuple) or space.shape is None:
        raise ConfigError(
            f"acting views of {column!r} need a Box, discrete or Dict space (of those), got "
            f"{space}; declare ViewRequirement.space, or view a key of it ('{column}.KEY')"
        )
    return np.zeros((num_envs, depth, *space.shape), dtype=space.dtype)


def _pick(value: Any, path: str) -> Any:
    """``value[a][b]`` for the key path ``"a.b"`` (``value`` itself for "")."""
    for part in path.split(".") if path else ():
        value = value[part]
    return value


def _pairs(history: Any, value: Any) -> Any:
    """``(history array, value)`` for each leaf of a history tree and the matching part of an
    observation (a dict or Batch with the same keys)."""
    if isinstance(history, dict):
        for key, sub in history.items():
            yield from _pairs(sub, value[key])
    else:
        yield history, value


def _leaf_map(history: Any, fn: Any) -> Any:
    if isinstance(history, dict):
        return {key: _leaf_map(sub, fn) for key, sub in history.items()}
    return fn(history)


def _depth(history: Any) -> int:
    while isinstance(history, dict):
        history = next(iter(history.values()))
    return int(history.shape[1])


def copy_history(target: Any, saved: Any) -> None:
    """Write a saved history (an array, or a dict tree of them) into ``target`` in place."""
    if isinstance(target, dict):
        for key, sub in target.items():
            copy_history(sub, saved[key])
    else:
        target[...] = saved


def stored_key(name: str) -> str:
    """The buffer key under which the collector stores the acting view ``name``."""
    return STORED_PREFIX + name


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
    """The column's space when it is not the env's (e.g. a float64 reward column): the per-step
    shape and dtype of the view, acting (its history, zeros before anything was seen) and
    training (values read from the buffer are cast to its dtype and their shape is checked).
    None: the env's observation or action space (float32 scalars for rewards)."""
    used_for_training: bool = True
    """Build this view for ``learn`` (from the buffer)."""
    used_for_acting: bool = True
    """Build this view for ``forward`` while collecting (past offsets only)."""
    pad: str = field(default="zeros")
    """What offsets outside the episode read: ``"zeros"``, or ``"edge"`` — the episode's first
    observation repeated before its start (and its last stored step after its end), as the
    buffer's ``stack_num`` and gymnasium's frame stacking do. ``"edge"`` is for ``obs`` views."""
    agents: str | tuple[str, ...] | None = field(default=None, converter=_agents_value)
    """Whose data the view reads (multi-agent runs only). None: the viewing agent's own history.
    ``"others"``: every other agent of the env's ``possible_agents``; ``"all"``: every agent,
    the viewing one included; a list of agent names or fnmatch patterns (``["adversary_*"]``
    for a group): those agents. The agents come in ``possible_agents`` order on a new axis 1
    (``[B, n_agents, ...]``, then the time axis of a list or range of shifts), with a bool mask
    ``[B, n_agents]`` (``[B, n_agents, T]``) under :func:`presence_key`: an agent is present at
    an env step when it acts then, and reads zeros where it is not (before it enters, after it
    leaves, outside the episode). Time is the env step, so ``shift=-1`` is the previous env
    step. Acting: ``obs`` at shifts <= 0, ``act`` and ``rew`` at shifts <= -1 (the others choose
    their actions in the same step); for training only (``used_for_acting=False``) one step
    more: ``obs`` at <= 1 (their next observations), ``act`` and ``rew`` at <= 0 (a centralised
    critic's joint action). Only parallel envs (agents acting together) have these views."""

    def __attrs_post_init__(self) -> None:
        parse_shift(self.shift)  # fail at construction, not in the loop
        if self.pad not in ("zeros", "edge"):
            raise ConfigError(f"ViewRequirement.pad={self.pad!r}: use 'zeros' or 'edge'")
        if self.agents is not None and self.pad != "zeros":
            raise ConfigError(
                f"ViewRequirement(agents={self.agents!r}, pad={self.pad!r}): other agents' "
                "views pad with zeros and a presence mask; drop pad"
            )

    def column(self, name: str) -> str:
        return self.data_col or name

    def column_space(
        self, name: str, observation_space: gym.Space | None, action_space: gym.Space | None
    ) -> gym.Space | None:
        """The space of one step of this view's column: :attr:`space` when declared, else the
        env's observation space for ``obs``, its action space for ``act``, float32 scalars for
        ``rew``, and None (values as stored) for other columns."""
        if self.space is not None:
            return self.space
        return _default_space(self.column(name), observation_space, action_space)

    def plain(self, name: str) -> bool:
        """True when the view ``name`` is just the stored column of that name (nothing to build)."""
        return (
            self.column(name) == name
            and self.offsets == (0,)
            and not self.ranged
            and self.agents is None
        )

    def agent_view_problem(self, name: str) -> str:
        """Why the view ``name`` of other agents cannot be built ("" when it can, or when it
        reads the viewing agent's own history): a column other than ``obs``/``act``/``rew``,
        or a shift that reaches past what is known when it is built."""
        if self.agents is None:
            return ""
        column = self.column(name)
        top = column.partition(".")[0]
        if top not in _ACTING_COLUMNS or (top != "obs" and "." in column):
            return (
                f"view {name!r} of agents {self.agents!r} reads {column!r}; other agents' views "
                "read obs (or obs.KEY), act or rew"
            )
        newest = _ACTING_COLUMNS[top] + (0 if self.used_for_acting else 1)
        if max(self.offsets) > newest:
            when = (
                "while acting (the others choose their actions in the same step)"
                if self.used_for_acting
                else "for training"
            )
            fix = (
                "; set used_for_acting=False to use it for training only"
                if self.used_for_acting and max(self.offsets) <= newest + 1
                else ""
            )
            return (
                f"view {name!r} ({column} of agents {self.agents!r} at shift {self.shift}) "
                f"cannot be built {when}: other agents' {top} is known up to shift {newest}"
                f"{fix}"
            )
        return ""

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


def _as_space(value: Any, space: gym.Space | None, declared: bool, name: str) -> Any:
    """``value`` (``[B, ...]``, one offset) in the dtype of ``space``; a ``declared`` space's
    shape is checked too (ConfigError naming the view). Dict and Tuple spaces pass unchanged."""
    if space is None or isinstance(value, Batch) or space.shape is None or space.dtype is None:
        return value
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return value
    value = np.asarray(value)
    if declared and value.shape[1:] != tuple(space.shape):
        raise ConfigError(
            f"view {name!r}: its declared space has shape {tuple(space.shape)} per step but the "
            f"buffer holds {value.shape[1:]}; fix ViewRequirement.space"
        )
    return value.astype(space.dtype, copy=False)


def training_views(
    buffer: Any,
    indices: np.ndarray,
    requirements: Mapping[str, ViewRequirement],
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    batch: Batch | None = None,
) -> dict[str, Any]:
    """The training-side views for sampled ``indices``: each ``[B, ...]`` (one offset) or
    ``[B, len(offsets), ...]`` (a list or range).

    A view the policy also used for acting is the one it got then, as the collector stored it
    (``view_<name>``); any other is built from the episode links, zero where an offset leaves
    the episode, in the dtype of its space (see :meth:`ViewRequirement.column_space`). ``batch``:
    the rows already read at ``indices`` (``buffer.sample``'s); stored views are taken from it
    rather than read again, and removed from it (they come back under their own names). Views
    of other agents (:attr:`ViewRequirement.agents`) are always the stored ones, each with its
    presence mask under :func:`presence_key`."""
    out: dict[str, Any] = {}
    for name, req in requirements.items():
        if not req.used_for_training or req.plain(name):
            continue
        if req.agents is not None:  # the multi-agent collector stored them with the step
            for key in (name, presence_key(name)):
                stored = batch.pop(stored_key(key), None) if batch is not None else None
                if stored is None:
                    stored = buffer.get(indices, stored_key(key))
                if stored is None:
                    raise ConfigError(
                        f"view {name!r} reads other agents' data (agents={req.agents!r}), which "
                        "the multi-agent collector stores with each step, and this buffer holds "
                        "none; collect with that collector, or drop agents= in a single-agent run"
                    )
                out[key] = stored
            continue
        if req.used_for_acting:
            key = stored_key(name)
            stored = batch.pop(key, None) if batch is not None else None
            if stored is None:
                stored = buffer.get(indices, key)
            if stored is not None:
                out[name] = stored
                continue
        column = req.column(name)
        space = req.column_space(name, observation_space, action_space)
        top, dot, rest = column.partition(".")
        parts = []
        for shift in req.offsets:
            if shift > 0 and top == "obs":
                # o_{t+k} is o'_{t+k-1}: one step fewer to walk, and the observation an episode
                # ended with (or the newest one of a running episode) is there to read
                idx, valid = shifted_index(buffer, indices, shift - 1)
                value = _read(buffer, idx, "obs_next" + dot + rest)
            else:
                idx, valid = shifted_index(buffer, indices, shift)
                value = _read(buffer, idx, column)
            # links stop at the episode's ends, so an "edge" view already repeats them
            if req.pad == "zeros" and not valid.all():
                value = _zero_rows(value, np.flatnonzero(~valid))
            parts.append(_as_space(value, space, req.space is not None, name))
        out[name] = _stack(parts) if req.ranged else parts[0]
    return out


# -- acting: per-env histories -----------------------------------------------------------------
def acting_requirements(requirements: Mapping[str, ViewRequirement]) -> dict[str, ViewRequirement]:
    """The requirements that shape acting (what a collector builds per env and stores): every
    view used for acting except the plain current observation."""
    return {
        name: req
        for name, req in requirements.items()
        if req.used_for_acting and not (name == "obs" and req.plain(name))
    }


def describe_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """``"added 'a'; removed 'b'; changed 'c'"`` for two dicts (empty when equal)."""
    parts = []
    for what, names in (
        ("added", [k for k in after if k not in before]),
        ("removed", [k for k in before if k not in after]),
        ("changed", [k for k in after if k in before and after[k] != before[k]]),
    ):
        if names:
            parts.append(f"{what} {', '.join(repr(n) for n in names)}")
    return "; ".join(parts)


class ActingViews:
    """Keeps, per env, the recent ``obs``, ``act`` and ``rew`` that a policy's acting views need,
    and builds those views for any subset of envs. Histories restart (zeros) with each episode.

    History arrays are ``[num_envs, K, *shape]`` with the newest entry last: for ``obs`` the
    newest is the current observation, for ``act``/``rew`` the previous step's. Their shape and
    dtype are the space a requirement declares for the column, else the default one
    (:meth:`ViewRequirement.column_space`).

    Envs are independent: ``record`` and ``begin_episode`` touch only the envs named, in any
    order, so an asynchronous collector that gets envs back one by one keeps each env's history
    exactly as a synchronous one does.
    """

    def __init__(
        self,
        requirements: Mapping[str, ViewRequirement],
        num_envs: int,
        observation_space: gym.Space,
        action_space: gym.Space,
    ) -> None:
        self.views: dict[str, tuple[str, tuple[int, ...], bool]] = {}
        #: views also used for training: stored with each step (see :meth:`for_buffer`)
        self.stored: tuple[str, ...] = ()
        depth: dict[str, int] = {}
        # a requirement's own space wins over the env's: column -> (first view declaring, space)
        declared: dict[str, tuple[str, gym.Space]] = {}
        for name, req in requirements.items():
            if req.agents is not None:
                raise ConfigError(
                    f"view {name!r} reads other agents' data (agents={req.agents!r}), which "
                    "only a multi-agent (PettingZoo) run has; drop agents= for this env"
                )
            column, offsets = req.column(name), req.offsets
            if not req.used_for_acting or (name == "obs" and req.plain(name)):
                continue  # the current observation is in every batch already
            top = column.partition(".")[0]
            newest = _ACTING_COLUMNS.get(top) if top == "obs" or "." not in column else None
            if newest is None or max(offsets) > newest:
                raise ConfigError(
                    f"view {name!r} ({column} at {req.shift}) cannot be built while acting: "
                    "only obs (shift <= 0; a Dict observation's keys as obs.KEY), act and rew "
                    "(shift <= -1) are known then; set used_for_acting=False to use it for "
                    "training only"
                )
            if req.pad == "edge" and top != "obs":
                raise ConfigError(
                    f"view {name!r}: pad='edge' repeats an episode's first observation, so it "
                    f"is for obs views; {column!r} has nothing before the first step"
                )
            key = column if req.pad == "zeros" else column + _EDGE
            self.views[name] = (key, offsets, req.ranged)
            if req.used_for_training:
                self.stored += (name,)
            depth[key] = max(depth.get(key, 0), newest - min(offsets) + 1)
            if req.space is not None:
                first, seen = declared.setdefault(column, (name, req.space))
                if seen != req.space:
                    raise ConfigError(
                        f"views of {column!r} declare different spaces ({seen} for {first!r} "
                        f"and {req.space} for {name!r}); one column has one space"
                    )
        #: history by column (``obs@edge``: the edge-padded observation history; ``obs.KEY``:
        #: one key of a Dict observation): ``[num_envs, K, *shape]`` arrays, a dict of them
        #: for a Dict space
        self.history: dict[str, Any] = {}
        for key, k in depth.items():
            column = key.partition("@")[0]
            space = (
                declared[column][1]
                if column in declared
                else _default_space(column, observation_space, action_space)
            )
            self.history[key] = _history(space, num_envs, k, column)

    def __bool__(self) -> bool:
        return bool(self.views)

    def begin_episode(self, env_ids: np.ndarray, obs: Any) -> None:
        """Forget the history of ``env_ids`` and start it from their first observation."""
        for key, hist in self.history.items():
            column, _, pad = key.partition("@")
            top, _, path = column.partition(".")
            if top != "obs":  # actions and rewards: nothing before the first step
                _leaf_map(hist, lambda leaf: leaf.__setitem__(env_ids, 0))
                continue
            for leaf, value in _pairs(hist, _pick(obs, path)):
                if pad:  # edge: the first observation fills the whole history
                    leaf[env_ids] = np.asarray(value, dtype=leaf.dtype)[:, None]
                    continue
                leaf[env_ids] = 0
                leaf[env_ids, -1] = value

    def record(self, env_ids: np.ndarray, act: Any, rew: Any, obs_next: Any) -> None:
        """Append one step of ``env_ids``: the action taken, its reward and the new observation."""
        new = {"obs": obs_next, "act": act, "rew": rew}
        for key, hist in self.history.items():
            top, _, path = key.partition("@")[0].partition(".")
            value = _pick(new[top], path)
            # one array per column but for Dict observations (one per key)
            for leaf, part in ((hist, value),) if type(hist) is np.ndarray else _pairs(hist, value):
                rows = leaf[env_ids]
                rows[:, :-1] = rows[:, 1:]
                rows[:, -1] = part
                leaf[env_ids] = rows

    def build(self, env_ids: np.ndarray, names: Sequence[str] | None = None) -> dict[str, Any]:
        """The acting views of ``env_ids`` (fresh arrays, in the history's dtype; a dict of them
        for a view of a Dict observation): all of them, or those ``names``."""
        out = {}
        for name, (key, offsets, ranged) in self.views.items():
            if names is not None and name not in names:
                continue
            hist = self.history[key]
            newest = _ACTING_COLUMNS[key.partition("@")[0].partition(".")[0]]
            last = _depth(hist) - 1
            cols = [last - (newest - s) for s in offsets]

            def view(leaf: np.ndarray, cols: list[int] = cols, ranged: bool = ranged) -> Any:
                rows = leaf[env_ids]
                return rows[:, cols] if ranged else rows[:, cols[0]]

            out[name] = view(hist) if type(hist) is np.ndarray else _leaf_map(hist, view)
        return out

    def for_buffer(self, views: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The part of built ``views`` to write with the step (the ones training uses), under
        their buffer keys, so :func:`training_views` returns exactly what acting saw."""
        return {stored_key(name): views[name] for name in self.stored}


def frame_stack_views(
    k: int, requirements: Mapping[str, ViewRequirement] | None = None
) -> dict[str, ViewRequirement]:
    """``requirements`` plus the acting view that stacks the last ``k`` observations into
    ``obs`` (``[B, k, ...]``, the first observation repeated at an episode's start, as the
    buffer's ``stack_num = k`` stacks them for training, which is why it is not stored)."""
    out = dict(requirements or {})
    if k < 1:
        raise ConfigError(f"frame_stack must be >= 1, got {k}")
    if k == 1:
        return out
    if "obs" in out and not out["obs"].plain("obs"):
        raise ConfigError(
            "frame stacking builds the 'obs' view, but the policy declares its own 'obs' view; "
            "stack frames with one of them"
        )
    out["obs"] = ViewRequirement("obs", shift=f"{1 - k}:0", pad="edge", used_for_training=False)
    return out
