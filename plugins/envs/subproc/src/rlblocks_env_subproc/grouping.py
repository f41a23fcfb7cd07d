"""How a vector env with several envs per worker routes calls: which worker owns which env ids,
and how per-worker results are joined back in the caller's order. Shared by the subproc, shmem
and ray backends (a mixin: it reads the backend's ``num_envs``, ``_workers`` with their
``start``/``stop``/``ids``, ``_env_worker``, ``_env_slot``, ``_all_ids``, ``_closed``,
``_last_obs``, ``_in_flight`` and its ``_stack`` of per-worker observations)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlblocks.arraytree import put_rows, take_rows
from rlblocks.errors import EnvWorkerError
from rlblocks.vector_env import VectorEnvBase


class WorkerGroups(VectorEnvBase):
    """Env-id routing and result joining for backends whose workers own contiguous env blocks
    (the lifecycle dunders come from :class:`~rlblocks.vector_env.VectorEnvBase`)."""

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray | None:
        """Validated env ids (None: every env, in order)."""
        if self._closed:
            raise EnvWorkerError("this vector env is closed; build a new one")
        if env_ids is None:
            return None
        ids = np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_envs):
            raise IndexError(f"env_ids {ids.tolist()} out of range for {self.num_envs} envs")
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"env_ids {ids.tolist()} name an env twice")
        return ids

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
