"""The cached writer: per-env caches; a whole episode enters the buffer when it ends.

Some algorithms (episodic returns computed once, hindsight relabelling, sequence models) want to
sample only complete episodes. With this :class:`~rlblocks.replay.Writer` every step goes first
into its env's cache (a small buffer with the per-env layout, ``cache_size`` slots per env);
when a step is done, that env's episode is written, in order, into the buffer with
:meth:`~rlblocks.replay.ReplayBuffer.extend`, so ``sample``, ``buf[...]``, ``prev`` / ``next``,
returns and files see only whole episodes. It goes on any layout, with any sampler and
relabeller: ``make_buffer("replay", ..., writer="cached", cache_size=500)``.

How a buffer with it differs from the buffer contract of
:func:`rlblocks.testing.check_buffer`, by design:

* steps of unfinished episodes live in ``writer.cache`` and are not in ``len(buf)``,
  ``sample_index(0)`` or ``buf[:]``; ``unfinished_index()`` of the buffer is always empty
  (``writer.cache.unfinished_index()`` lists the cached ones);
* ``add`` returns the *cache* slots (``index``, ``ep_start``); the episode return and length it
  reports at done steps are those of the whole episode, as for every buffer;
* ``sample_index(0)`` lists transitions in the order they entered the buffer (episode by
  episode, in the order episodes ended), not in the order they were added.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.contracts import Batch
from rlblocks.replay import Relabeller, ReplayBuffer, Sampler
from rlblocks_buffer_vector.buffer import PerEnvLayout

__all__ = ["CachedReplayBuffer", "CachedWriter"]


def _flat(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """Nested Batch/dict -> ``{"obs.pos": array}`` (dots: hdf5 would make groups of slashes)."""
    out: dict[str, np.ndarray] = {}
    for key, value in tree.items():
        if isinstance(value, Batch | Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = np.asarray(value)
    return out


def _nested(flat: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """``{"obs.pos": array}`` -> nested dict."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        node = out
        *parents, leaf = name.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


class CachedWriter:
    """Holds each env's steps back until its episode ends, then admits the episode whole.

    Args:
        cache_size: slots of each env's cache; make it at least the longest episode (a longer
            episode keeps only its newest ``cache_size`` steps, with a warning).
    """

    name = "cached"

    def __init__(self, cache_size: int = 1000) -> None:
        if int(cache_size) < 1:
            raise ValueError(f"cache_size must be >= 1, got {cache_size}")
        self.cache_size = int(cache_size)
        self.buffer: ReplayBuffer | None = None
        self.cache: ReplayBuffer | None = None
        self._warned = False

    def options(self) -> dict[str, Any]:
        return {"cache_size": self.cache_size}

    def bind(self, buffer: ReplayBuffer) -> None:
        self.buffer = buffer
        n = buffer.num_envs
        self.cache = ReplayBuffer(
            self.cache_size * n, n, ignore_obs_next=buffer.ignore_obs_next,
            layout=PerEnvLayout(self.cache_size * n, n),
        )

    def add(
        self, batch: Batch | Mapping[str, Any], env_ids: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Add one step to the caches; every episode that ends at it enters the buffer.
        Returns ``(index, ep_rew, ep_len, ep_start)`` with cache slots."""
        assert self.cache is not None
        out = self.cache.add(batch, env_ids)
        index, _, ep_len, ep_start = out
        ended = np.flatnonzero(ep_len)
        if len(ended):
            envs = np.asarray(self.cache.env_id)[index[ended]].astype(np.int64)
            self._admit(ep_start[ended], index[ended], envs, ep_len[ended])
        return out

    def _admit(self, first: np.ndarray, last: np.ndarray, envs: np.ndarray,
               ep_len: np.ndarray) -> None:
        """Write the cached episodes ``first .. last`` (cache slots) into the buffer, in order."""
        cache, buf = self.cache, self.buffer
        assert cache is not None and buf is not None
        sub = self.cache_size
        if (ep_len > sub).any():
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"an episode of {int(ep_len.max())} steps outgrew cache_size={sub}: only its "
                    f"newest {sub} steps reach the buffer; make cache_size at least the longest "
                    "episode",
                    stacklevel=4,
                )
            # the episode's first steps were overwritten: start at its oldest cached step
            first = first.copy()
            for row in np.flatnonzero(ep_len > sub):
                slot = int(last[row])
                while int(cache.prev(slot)) != slot:
                    slot = int(cache.prev(slot))
                first[row] = slot
        length = np.minimum(ep_len, sub)
        offsets = np.arange(int(length.sum())) - np.repeat(np.cumsum(length) - length, length)
        slots = cache.advance(np.repeat(first, length), offsets)
        rows = cache[slots]
        rows.pop("done", None)
        buf.extend(rows, np.repeat(envs, length))

    def reset(self, keep_statistics: bool = False) -> None:
        """Forget the caches too."""
        if self.cache is not None:
            self.cache.reset(keep_statistics)

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray:
        """End every cached episode (of the envs ``env_ids``; None: all) as truncated at its
        newest step and admit it; return the cache slots that were marked."""
        cache = self.cache
        assert cache is not None
        idx = cache.unfinished_index()
        if env_ids is not None and len(idx):
            idx = idx[np.isin(np.asarray(cache.env_id)[idx], np.asarray(env_ids))]
        if len(idx):
            envs = np.asarray(cache.env_id)[idx].astype(np.int64)
            stats = cache.layout.stats  # type: ignore[attr-defined]
            ep_len = stats.len[envs].copy()
            first = stats.start[envs].copy()
            cache.truncate_unfinished(envs)
            self._admit(first, idx, envs, ep_len)
        return idx

    # --- files: the caches' raw storage and layout state ------------------------------------

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        cache = self.cache
        assert cache is not None
        arrays = {f"layout.{k}": v for k, v in cache.layout.arrays().items()}
        arrays.update({f"row.{k}": v for k, v in _flat(cache.storage_arrays).items()})
        return {"warned": self._warned, "layout": cache.layout.state()}, arrays

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Put the saved storage back slot for slot (an extend of every slot, env by env, into
        the emptied caches lands each row where it was), then the layout's pointers."""
        cache = self.cache
        assert cache is not None
        cache.reset()
        self._warned = bool(state.get("warned", False))
        rows = _nested({k[len("row."):]: v for k, v in arrays.items() if k.startswith("row.")})
        if rows:
            envs = np.repeat(np.arange(cache.num_envs), self.cache_size)
            cache.extend(rows, envs)
        cache.layout.load(
            state["layout"], {k[len("layout."):]: v for k, v in arrays.items()
                              if k.startswith("layout.")}
        )


class CachedReplayBuffer(ReplayBuffer):
    """A :class:`~rlblocks.replay.ReplayBuffer` (shared-ring layout by default) that holds only
    complete episodes: the cached writer with ``cache_size`` slots per env."""

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        cache_size: int = 1000,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        *,
        layout: Any = None,
        sampler: Sampler | None = None,
        relabel: Relabeller | None = None,
    ) -> None:
        super().__init__(
            size, num_envs, stack_num, ignore_obs_next, seed, storage, path, layout=layout,
            sampler=sampler, relabel=relabel, writer=CachedWriter(cache_size),
        )

    @property
    def cache(self) -> ReplayBuffer:
        """The per-env caches of steps whose episode has not ended."""
        return self.writer.cache  # type: ignore[union-attr, return-value]
