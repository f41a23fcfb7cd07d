"""``CachedReplayBuffer``: per-env caches; a whole episode moves into the main buffer when it ends.

Some algorithms (episodic returns computed once, hindsight relabelling, sequence models) want to
sample only complete episodes. Here every step goes first into its env's cache (a
:class:`~rlblocks_buffer_vector.VectorReplayBuffer` with ``cache_size`` slots per env); when a step
is done, that env's episode is copied, in order, into the main buffer (this object, a plain
:class:`~rlblocks.buffer.ReplayBuffer`), which is what ``sample``, ``buf[...]``, ``prev`` /
``next``, returns and hdf5 files see.

How it differs from the buffer contract of :func:`rlblocks.testing.check_buffer`, by design:

* steps of unfinished episodes live in ``buf.cache`` and are not in ``len(buf)``,
  ``sample_index(0)`` or ``buf[:]``; ``unfinished_index()`` of the main buffer is always empty
  (``buf.cache.unfinished_index()`` lists the cached ones);
* ``add`` returns the *cache* slots (``index``, ``ep_start``); the episode return and length it
  reports at done steps are those of the whole episode, as for every buffer;
* ``sample_index(0)`` lists transitions in the order they entered the main buffer (episode by
  episode, in the order episodes ended), not in the order they were added.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.batch import Batch
from rlblocks.buffer import ReplayBuffer
from rlblocks_buffer_vector.buffer import VectorReplayBuffer, add_in_runs

__all__ = ["CachedReplayBuffer"]


class CachedReplayBuffer(ReplayBuffer):
    """Replay buffer that holds only complete episodes; unfinished ones wait in per-env caches.

    Args:
        size: slots of the main buffer (complete episodes; the oldest are overwritten first).
        num_envs: how many envs may add to it.
        cache_size: slots of each env's cache; make it at least the longest episode (a longer
            episode keeps only its newest ``cache_size`` steps, with a warning).
        stack_num, ignore_obs_next, seed: as for :class:`~rlblocks.buffer.ReplayBuffer`.
    """

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        cache_size: int = 1000,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
    ) -> None:
        if int(cache_size) < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        super().__init__(size, num_envs, stack_num, ignore_obs_next, seed)
        self.cache_size = int(cache_size)
        self.cache = VectorReplayBuffer(
            self.cache_size * self.num_envs, self.num_envs, ignore_obs_next=self.ignore_obs_next
        )
        self._warned = False

    def _init_kwargs(self) -> dict[str, Any]:
        return {**super()._init_kwargs(), "cache_size": self.cache_size}

    def add(
        self, batch: Batch | Mapping[str, Any], env_ids: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Add one step of one or ``N`` envs to their caches (arguments as for
        :meth:`ReplayBuffer.add`); every episode that ends at this step moves to the main buffer.

        Returns ``(index, ep_rew, ep_len, ep_start)`` with ``index`` and ``ep_start`` slots of
        ``self.cache``."""
        out = self.cache.add(batch, env_ids)
        index, _, ep_len, _ = out
        ended = np.flatnonzero(ep_len)
        if len(ended):
            n = len(index)
            envs = np.arange(n) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
            self._move(index[ended], envs[ended], ep_len[ended])
        return out

    def _move(self, last: np.ndarray, envs: np.ndarray, ep_len: np.ndarray) -> None:
        """Copy the episodes ending at cache slots ``last`` into the main buffer, in order."""
        sub, offset = self.cache.sub_size, self.cache._offset
        if not self._warned and (ep_len > sub).any():
            self._warned = True
            warnings.warn(
                f"an episode of {int(ep_len.max())} steps outgrew cache_size={sub}: only its "
                f"newest {sub} steps reach the buffer; make cache_size at least the longest "
                "episode",
                stacklevel=3,
            )
        length = np.minimum(ep_len, sub)
        rows = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
        end_local = np.repeat(last - offset[envs], length)
        first = end_local - np.repeat(length, length) + 1
        slots = np.repeat(offset[envs], length) + (first + rows) % sub
        cols = self.cache._raw_columns(slots, with_obs_next=not self.ignore_obs_next)
        self._append(cols, np.repeat(envs, length), "the cached episode")

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Add ``other``'s valid transitions step by step, each env's in its order (through the
        caches, so its unfinished episodes wait there); return the cache slots written."""
        return add_in_runs(self, other)

    def reset(self, keep_statistics: bool = False) -> None:
        """Forget the main buffer and the caches."""
        super().reset(keep_statistics)
        self.cache.reset(keep_statistics)

    def truncate_unfinished(self) -> np.ndarray:
        """End every cached episode as truncated at its newest step and move it into the main
        buffer; return the cache slots that were marked."""
        idx = self.cache.unfinished_index()
        if len(idx):
            envs = self.cache.env_id[idx]
            ep_len = self.cache._ep_len[envs].copy()
            self.cache.truncate_unfinished()
            self._move(idx, envs, ep_len)
        return idx

    def _write_hdf5(self, f: Any, compression: str | None) -> None:
        super()._write_hdf5(f, compression)
        self.cache._write_hdf5(f.create_group("cache", track_order=True), compression)

    def _read_hdf5(self, f: Any) -> None:
        super()._read_hdf5(f)
        self.cache._read_hdf5(f["cache"])
