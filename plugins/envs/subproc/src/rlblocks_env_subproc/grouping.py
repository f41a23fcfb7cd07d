"""How a vector env with several envs per worker routes calls: which worker owns which env ids,
how per-worker results are joined back in the caller's order, and the calls that every such
backend answers the same way once it can send one message per worker (render, attributes,
snapshots). Shared by the subproc, shmem and ray backends (a mixin: it reads the backend's
``num_envs``, ``_workers`` with their ``start``/``stop``/``ids``, ``_env_worker``,
``_env_slot``, ``_all_ids``, ``_closed``, ``_last_obs``, ``_in_flight``, ``_needs_reset``
and its ``_stack`` of per-worker observations, and calls its ``_call_groups``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space

from rlblocks.collect import VectorEnvBase, as_env_ids, observation_mismatch
from rlblocks.contracts import EnvWorkerError, put_rows, take_rows


class WorkerGroups(VectorEnvBase):
    """Env-id routing and result joining for backends whose workers own contiguous env blocks
    (the lifecycle dunders come from :class:`~rlblocks.collect.VectorEnvBase`)."""

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray | None:
        """Validated env ids (None: every env, in order)."""
        if self._closed:
            raise EnvWorkerError("this vector env is closed; build a new one")
        if env_ids is None:
            return None
        return as_env_ids(env_ids, self.num_envs)

    def _reset_plan(
        self, env_ids: Sequence[int] | np.ndarray | None, seed: int | Sequence[int] | None
    ) -> tuple[np.ndarray | None, np.ndarray, list[int | None]]:
        """``(ids, all_ids, seeds)`` for ``reset``: validated ids (None: all), the ids in full,
        and one seed per env (an int ``seed`` gives env ``i`` the seed ``seed + i``). Refuses
        envs with a step in flight."""
        ids = self._ids(env_ids)
        all_ids = self._all_ids if ids is None else ids
        if self._in_flight[all_ids].any():
            raise EnvWorkerError(
                f"envs {all_ids[self._in_flight[all_ids]].tolist()} have a step in flight; "
                "call step_wait() before resetting them"
            )
        if seed is None:
            seeds: list[int | None] = [None] * len(all_ids)
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + int(i) for i in all_ids]
        else:
            seeds = [None if s is None else int(s) for s in seed]
            if len(seeds) != len(all_ids):
                raise ValueError(f"got {len(seeds)} seeds for {len(all_ids)} envs")
        return ids, all_ids, seeds

    def _groups(
        self, ids: np.ndarray | None
    ) -> tuple[list[tuple[Any, Any, Any, np.ndarray]], np.ndarray | None]:
        """``[(worker, slots or None, rows into the caller's arrays, global ids)]`` and the
        permutation that puts the joined results back in the caller's order."""
        if ids is None or (len(ids) == self.num_envs and (ids == self._all_ids).all()):
            return [(w, None, slice(w.start, w.stop), w.ids) for w in self._workers], None
        owner = self._env_worker[ids]
        groups, positions = [], []
        for w_index in np.unique(owner):
            rows = np.flatnonzero(owner == w_index)
            gids = ids[rows]
            groups.append((self._workers[w_index], self._env_slot[gids].tolist(), rows, gids))
            positions.append(rows)
        joined = np.concatenate(positions)
        if (np.diff(joined) > 0).all():
            return groups, None
        return groups, np.argsort(joined)

    def _join_step(
        self, parts: list[tuple[np.ndarray, Any]], order: np.ndarray | None
    ) -> tuple[np.ndarray, Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Join per-worker step results ``(ids, (obs, rew, term, trunc, infos))`` into
        ``(env_ids, obs, rew, terminated, truncated, infos)``; ``order`` permutes the joined
        rows (None: as joined). Remembers the observations for envs that must be faked later."""
        obs = self._stack([p[1][0] for p in parts])
        rew: list[float] = []
        term: list[bool] = []
        trunc: list[bool] = []
        infos: list[dict] = []
        for _, (_, r, te, tr, inf) in parts:
            rew += r
            term += te
            trunc += tr
            infos += inf
        rew_a = np.array(rew, dtype=np.float64)
        term_a = np.array(term, dtype=bool)
        trunc_a = np.array(trunc, dtype=bool)
        ids = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        if order is not None:
            obs = take_rows(obs, order)
            rew_a, term_a, trunc_a = rew_a[order], term_a[order], trunc_a[order]
            infos = [infos[k] for k in order]
            ids = ids[order]
        put_rows(self._last_obs, ids, obs)
        return ids, obs, rew_a, term_a, trunc_a, infos

    def _obs_problem(self, parts: list[tuple[np.ndarray, Any]]) -> str | None:
        """The first observation of ``parts`` (per-worker ``(ids, payload)``, the observations
        first in each payload) whose leaf shape is not the one its space says, in the words of
        the in-process backend (env id, leaf path, both shapes, the fix); None when all fit."""
        ids = [i for p in parts for i in p[0].tolist()]
        items = [o for p in parts for o in p[1][0]]
        return observation_mismatch(self.observation_space, items, ids)

    def _misshapen(
        self, parts: list[tuple[np.ndarray, Any]], command: str, cause: BaseException
    ) -> None:
        """Raise EnvWorkerError naming the env and the observation leaf (its path) whose shape
        is not the one its space says; returns when every leaf has its shape. Called only once
        stacking the workers' observations failed (Box observations are checked in the
        worker), so the usual step pays nothing for it."""
        problem = self._obs_problem(parts)
        if problem is not None:
            name = getattr(getattr(self, "spec", None), "id", None) or "the env"
            raise EnvWorkerError(f"{name} ({command}): {problem}") from cause

    # -- calls routed the same way by every backend -------------------------------------------

    def _call_groups(
        self,
        op: str,
        groups: list[tuple[Any, Any, Any, np.ndarray]],
        args_for: Callable[[Any, Any], tuple],
    ) -> list[Any]:
        """Send the env call ``op`` (``"render"``, ``"get_attr"``, ``"set_attr"``,
        ``"snapshot"`` or ``"restore"``) to each group's worker with the arguments
        ``args_for(slots, rows)`` and return each worker's reply, in the groups' order; an env
        error is raised once every reply is in. The one thing a backend must supply here."""
        raise NotImplementedError

    def _call_envs(self, op: str, env_ids: Any, *args: Any) -> list[Any]:
        """``op(slots, *args)`` in each worker owning some of ``env_ids``: one entry per env,
        in the caller's order (None where a worker replied nothing)."""
        ids = self._ids(env_ids)
        groups, order = self._groups(ids)
        replies = self._call_groups(op, groups, lambda slots, rows: (slots, *args))
        out: list[Any] = []
        for (_, _, _, gids), reply in zip(groups, replies):
            out += reply if reply is not None else [None] * len(gids)
        return out if order is None else [out[k] for k in order]

    def render(self, env_ids: Sequence[int] | np.ndarray | None = None) -> list[Any]:
        """Render the given envs in their workers (their ``render_mode`` decides the output)."""
        return self._call_envs("render", env_ids)

    def get_attr(self, name: str, env_ids: Sequence[int] | np.ndarray | None = None) -> list[Any]:
        """Read an attribute of each env (through gymnasium's wrappers); values are pickled."""
        return self._call_envs("get_attr", env_ids, name)

    def set_attr(
        self, name: str, value: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> None:
        """Set an attribute on each env in its worker."""
        self._call_envs("set_attr", env_ids, name, value)

    def snapshot(self, env_ids: Sequence[int] | np.ndarray | None = None) -> list[dict[str, Any]]:
        """Each env's state as plain values, taken in its worker (see
        :mod:`rlblocks.collect`): ``{"env": snapshot or None, "why": why not, "needs_reset":
        whether its episode ended}``. No step may be in flight."""
        ids = self._all_ids if env_ids is None else self._ids(env_ids)
        if np.count_nonzero(self._in_flight[ids]):
            raise EnvWorkerError("snapshot() while steps are in flight; call step_wait() first")
        out = self._call_envs("snapshot", ids)
        for i, entry in zip(ids.tolist(), out):
            entry["needs_reset"] = bool(self._needs_reset[i])
        return out

    def restore(
        self,
        snapshots: Sequence[Mapping[str, Any]],
        env_ids: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Put each env back where :meth:`snapshot` found its twin (every entry must hold an
        ``"env"`` snapshot)."""
        ids = self._all_ids if env_ids is None else self._ids(env_ids)
        if len(snapshots) != len(ids):
            raise ValueError(f"got {len(snapshots)} snapshots for {len(ids)} envs")
        if any(s.get("env") is None for s in snapshots):
            raise ValueError("restore() needs a snapshot of every env")
        groups, _ = self._groups(ids)

        def args_for(slots: Any, rows: Any) -> tuple:
            picked = snapshots[rows] if isinstance(rows, slice) else [snapshots[r] for r in rows]
            return (slots, [p["env"] for p in picked])

        self._call_groups("restore", groups, args_for)
        for i, entry in zip(ids.tolist(), snapshots):
            self._needs_reset[i] = bool(entry.get("needs_reset", False))

    @property
    def ready_env_ids(self) -> np.ndarray:
        """Envs without a step in flight."""
        return np.flatnonzero(~self._in_flight)

    @property
    def batched_observation_space(self) -> gym.Space:
        """The space of a stacked observation of all envs."""
        return batch_space(self.observation_space, self.num_envs)
