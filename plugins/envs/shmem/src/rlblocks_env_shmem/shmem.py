"""The shared-memory vector env: subproc's workers, with bulk data in one shared block.

Layout of the block (``N = num_envs``; every array starts on a 64-byte boundary)::

    obs leaf k   [N, *shape_k]   one array per Box/Discrete/MultiDiscrete/MultiBinary leaf of the
                                 (possibly nested Dict/Tuple) observation space
    rew          [N] float64
    terminated   [N] bool
    truncated    [N] bool
    act          [N, *act_shape] when the action space has a fixed shape and dtype

A worker writes the rows of its own envs, so commands and replies carry only env slots and infos;
the envs the parent steps itself (``local_envs``) write their rows the same way.

The block must exist before the workers that write it start (it is handed to them as they are
created), and its layout depends on the spaces: these are learnt first from a short-lived worker
process that builds env 0 only, reports its spaces and closes it. So building env 0 never runs
in the calling process: a constructor that hangs is stopped after ``start_timeout`` (as a
worker's is), one that crashes is reported naming env 0, and a factory that hands out one env
instance gets a copy closed in that process, never the instance itself.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rlblocks.contracts import ConfigError
from rlblocks_env_subproc import worker as W
from rlblocks_env_subproc.subproc import Request, SubprocVectorEnv, Worker
from rlblocks_env_subproc.worker import check_observations

_ALIGN = 64
_FLAT_SPACES = (
    gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary
)
Path = tuple[Any, ...]


def _leaves(space: gym.Space, path: Path = ()) -> list[tuple[Path, tuple[int, ...], np.dtype]]:
    """``(path, shape, dtype)`` of every array leaf of ``space``, depth first."""
    if isinstance(space, _FLAT_SPACES):
        return [(path, tuple(space.shape), np.dtype(space.dtype))]
    if isinstance(space, gym.spaces.Dict):
        return [leaf for k, sub in space.spaces.items() for leaf in _leaves(sub, (*path, k))]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for k, sub in enumerate(space.spaces) for leaf in _leaves(sub, (*path, k))]
    raise ConfigError(
        f"the shmem backend cannot put {type(space).__name__} observations in shared memory; "
        "use backend='subproc' for this env"
    )


def _get(obs: Any, path: Path) -> Any:
    for key in path:
        obs = obs[key]
    return obs


class ShmLayout:
    """Offsets of every array in the shared block; picklable, sent to workers at start."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, n: int) -> None:
        self.n = n
        self.obs_leaves = _leaves(observation_space)
        self.act = (
            (tuple(action_space.shape), np.dtype(action_space.dtype))
            if isinstance(action_space, _FLAT_SPACES)
            else None
        )
        specs: list[tuple[tuple[int, ...], np.dtype]] = [
            ((n, *shape), dtype) for _, shape, dtype in self.obs_leaves
        ]
        specs += [((n,), np.dtype(np.float64)), ((n,), np.dtype(bool)), ((n,), np.dtype(bool))]
        if self.act is not None:
            specs.append(((n, *self.act[0]), self.act[1]))
        self.arrays: list[tuple[int, tuple[int, ...], np.dtype]] = []
        offset = 0
        for shape, dtype in specs:
            self.arrays.append((offset, shape, dtype))
            nbytes = math.prod(shape) * dtype.itemsize
            offset += -(-max(nbytes, 1) // _ALIGN) * _ALIGN
        self.nbytes = offset

    def views(self, raw: Any) -> list[np.ndarray]:
        buf = memoryview(raw).cast("B")
        return [
            np.frombuffer(buf, dtype=dtype, count=math.prod(shape), offset=off).reshape(shape)
            for off, shape, dtype in self.arrays
        ]


class ShmTransport:
    """Worker side of the shared block: writes results into its envs' rows."""

    def __init__(self, layout: ShmLayout, raw: Any, tree: bool) -> None:
        self.layout = layout
        self.raw = raw
        self.tree = tree  # obs is a Dict/Tuple: write leaf by leaf

    def attach(self, env_ids: Sequence[int], observation_space: gym.Space) -> None:
        views = self.layout.views(self.raw)
        k = len(self.layout.obs_leaves)
        self.obs_views = views[:k]
        self.rew, self.term, self.trunc = views[k : k + 3]
        self.act = views[k + 3] if self.layout.act is not None else None

    def read_actions(self, gids: Any) -> np.ndarray:
        # a copy: an env that keeps its action must not see the next one appear in it
        return self.act[gids].copy() if isinstance(gids, slice) else self.act[gids]

    def _write_obs(self, gids: Any, obs: list[Any]) -> None:
        # shapes are compared before writing: numpy would broadcast a (1,) observation into a
        # (4,) row without a word
        try:
            if not self.tree:
                rows = np.asarray(obs)
                if rows.shape[1:] != self.obs_views[0].shape[1:]:
                    raise ValueError("observation shape")
                self.obs_views[0][gids] = rows
                return
            for view, (path, _, _) in zip(self.obs_views, self.layout.obs_leaves):
                rows = np.asarray([_get(o, path) for o in obs])
                if rows.shape[1:] != view.shape[1:]:
                    raise ValueError("observation shape")
                view[gids] = rows
        except (ValueError, TypeError, KeyError, IndexError):
            # name the env and the shapes when an observation does not fit its space
            check_observations(gids, obs, [(p, s) for p, s, _ in self.layout.obs_leaves])
            raise

    def pack_step(
        self, gids: Any, obs: list[Any], rew: list[float], term: list[bool], trunc: list[bool],
        infos: list[dict],
    ) -> Any:
        self._write_obs(gids, obs)
        self.rew[gids] = rew
        self.term[gids] = term
        self.trunc[gids] = trunc
        return pack_infos(infos) if any(infos) else None

    def pack_reset(self, gids: Any, obs: list[Any], infos: list[dict]) -> Any:
        self._write_obs(gids, obs)
        return pack_infos(infos) if any(infos) else None


#: numpy scalar types whose values pack_infos sends as the bytes of one array per key
_NUMPY_SCALARS = frozenset(
    (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint64,
     np.uint32, np.uint16, np.uint8, np.bool_)
)
_PLAIN_SCALARS = (float, int, bool)


def pack_infos(infos: list[dict]) -> Any:
    """The infos of one reply in the form that travels (undone by :func:`unpack_infos`).

    MuJoCo envs return the same few numpy scalars in every step's info, and pickling a numpy
    scalar goes through its ``__reduce__`` (a function, a dtype and a bytes object each): for
    four such dicts that costs the worker several times what the rest of its reply does. When
    every dict has the same keys in the same order and each key's values share one scalar type,
    the infos go as ``(keys, columns)``: a numpy scalar column as its dtype and the bytes of one
    array, a Python float/int/bool column as the list it is. The parent rebuilds dicts with the
    same keys, order, types and values. Anything else goes as the list of dicts."""
    keys = tuple(infos[0])
    n = len(keys)
    for info in infos:
        if len(info) != n or tuple(info) != keys:
            return infos
    cols: list[tuple[str | None, Any]] = []
    for key in keys:
        vals = [info[key] for info in infos]
        kind = type(vals[0])
        for v in vals:
            if type(v) is not kind:
                return infos
        if kind in _NUMPY_SCALARS:
            cols.append((np.dtype(kind).str, np.array(vals, dtype=kind).tobytes()))
        elif kind in _PLAIN_SCALARS:
            cols.append((None, vals))
        else:
            return infos
    return keys, cols


def unpack_infos(payload: Any) -> list[dict]:
    """The list of info dicts :func:`pack_infos` packed."""
    if type(payload) is not tuple:
        return payload
    keys, cols = payload
    columns = [data if dtype is None else np.frombuffer(data, dtype) for dtype, data in cols]
    return [dict(zip(keys, row)) for row in zip(*columns)]


class ShmemVectorEnv(SubprocVectorEnv):
    """Like :class:`~rlblocks_env_subproc.subproc.SubprocVectorEnv` (same options, async
    stepping, fault handling), but observations, rewards, flags and actions travel through
    shared memory: the pipes carry only commands and non-empty infos.

    Returned observations are fresh arrays (copied out of the shared block), safe to keep.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], **options: Any) -> None:
        super().__init__(env_fns, **options)

    @staticmethod
    def observation_space_problem(space: gym.Space) -> str | None:
        """Why this backend cannot carry observations of ``space`` (None: it can). Asked by
        ``backend="auto"`` before it picks this backend."""
        try:
            _leaves(space)
        except ConfigError as exc:
            return str(exc)
        return None

    def _learn_spaces(self) -> None:
        """Spaces, spec, metadata and render mode of env 0, from a worker process that builds
        env 0 alone (bounded by ``start_timeout``, failures reported naming env 0) and closes it
        again; the calling process never builds it."""
        probe = Worker(-1, 0, 1, "the worker that learns the spaces")
        self._transport = None  # a pipe worker: the shared block does not exist yet
        self._last_obs = None
        try:
            self._start_worker(probe)
            self._handshake(probe)
            with contextlib.suppress(OSError, ValueError):
                probe.conn.send((W.CLOSE,))
            probe.process.join(5.0)  # the env's close(); a slow one is not waited for
        finally:
            if probe.process is not None:
                if probe.process.is_alive():
                    probe.process.kill()
                    probe.process.join(1.0)
                with contextlib.suppress(OSError):
                    probe.conn.close()
        self._last_obs = None  # the shared block keeps the last observations

    def _setup_transport(self) -> None:
        self._learn_spaces()
        self._layout = ShmLayout(self.observation_space, self.action_space, self.num_envs)
        self._raw = self._ctx.RawArray("b", self._layout.nbytes)
        self._tree = not isinstance(self.observation_space, _FLAT_SPACES)
        self._transport = ShmTransport(self._layout, self._raw, self._tree)
        self._last_obs = None
        views = self._layout.views(self._raw)
        k = len(self._layout.obs_leaves)
        self._obs_views = views[:k]
        self._rew, self._term, self._trunc = views[k : k + 3]
        self._act = views[k + 3] if self._layout.act is not None else None

    def _make_local_transport(self) -> Any:
        # the parent's envs write their rows of the same block, so results assemble as one
        return ShmTransport(self._layout, self._raw, self._tree)

    def _write_actions(self, actions: Any, ids: np.ndarray | None) -> None:
        if self._act is None:
            return
        rows = slice(None) if ids is None else ids
        try:
            self._act[rows] = actions
        except (ValueError, TypeError):  # off the usual path: only when the shapes disagree
            self._act[rows] = self._fit_actions(actions, len(self._act[rows]))

    def _fit_actions(self, actions: Any, n: int) -> np.ndarray:
        """``actions`` in the shape of the action rows ``[n, *shape]``: Discrete actions given
        as ``[n, 1]`` (as a policy with one output column gives them) are taken like the other
        backends take them; any other shape is refused naming both."""
        shape = self._act.shape[1:]
        arr = np.asarray(actions)
        if isinstance(self.action_space, gym.spaces.Discrete) and arr.shape == (n, 1):
            return arr.reshape(n)
        raise ValueError(
            f"actions of shape {arr.shape} do not fit {n} envs of action space "
            f"{self.action_space}: expected shape {(n, *shape)}"
            + (" (or (n, 1))" if isinstance(self.action_space, gym.spaces.Discrete) else "")
        )

    def _encode_actions(self, w: Any, actions: Any, rows: Any) -> Any:
        if self._act is None:
            return super()._encode_actions(w, actions, rows)
        return None  # the worker reads them from shared memory

    def _read_obs(self, ids: np.ndarray | None) -> Any:
        """A fresh copy of the observation rows ``ids`` (None: all, in order)."""
        def one(view: np.ndarray) -> np.ndarray:
            return view.copy() if ids is None else view[ids]

        if not self._tree:
            return one(self._obs_views[0])
        out: Any = _build(self.observation_space, iter(self._obs_views), one)
        return out

    def _ids_of(self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None) -> Any:
        if order is None and len(parts) == len(self._workers) and all(
            p[0] is w.ids for p, w in zip(parts, self._workers)
        ):  # every worker's whole block, in order (a step of every env): no ids to join
            return self._all_ids, None
        ids = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        if order is not None:
            ids = ids[order]
        if len(ids) == self.num_envs and (ids == self._all_ids).all():
            return ids, None
        return ids, ids

    @staticmethod
    def _infos(parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None) -> list[dict]:
        infos: list[dict] = []
        for ids, payload in parts:
            infos += unpack_infos(payload) if payload is not None else [{} for _ in range(len(ids))]
        return infos if order is None else [infos[k] for k in order]

    def _assemble_step(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        _ids, rows = self._ids_of(parts, order)
        if rows is None:
            rew, term, trunc = self._rew.copy(), self._term.copy(), self._trunc.copy()
        else:
            rew, term, trunc = self._rew[rows], self._term[rows], self._trunc[rows]
        return self._read_obs(rows), rew, term, trunc, self._infos(parts, order)

    def _assemble_reset(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[Any, list[dict]]:
        _, rows = self._ids_of(parts, order)
        return self._read_obs(rows), self._infos(parts, order)

    def _synthetic_step(self, ids: np.ndarray, reason: str) -> Any:
        # the obs rows keep the last observation the failed worker wrote
        self._rew[ids] = 0.0
        self._term[ids] = False
        self._trunc[ids] = True
        return [{"env_worker_restarted": reason} for _ in range(len(ids))]

    def _decode_step(self, req: Request, payload: Any) -> Any:
        return payload


def _build(space: gym.Space, views: Any, read: Callable[[np.ndarray], np.ndarray]) -> Any:
    """Rebuild the Dict/Tuple structure of ``space`` from its leaf views, depth first."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _build(sub, views, read) for k, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_build(sub, views, read) for sub in space.spaces)
    return read(next(views))
