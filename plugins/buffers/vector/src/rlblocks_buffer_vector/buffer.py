"""The per-env layout: one circular sub-buffer per env, all in one contiguous storage.

Slots ``[e * sub_size, (e + 1) * sub_size)`` belong to env ``e`` (``sub_size = size // num_envs``),
and each env overwrites only its own oldest steps, so a fast env never pushes a slow env's
episodes out of the buffer and each env's steps lie together in memory. It is a
:class:`~rlblocks.replay.Layout`: storage, samplers, relabellers, writers, reads, returns and
files are those of any :class:`~rlblocks.replay.ReplayBuffer`.

Nothing but the data is stored per slot. Inside a sub-buffer an env's steps are consecutive
slots (circularly), so the episode links follow from the done flags and each sub-buffer's write
position and fill: the step before slot ``i`` is the slot before it, unless that one is done or
``i`` is its sub-buffer's oldest step; the step after ``i`` is the slot after it, unless ``i`` is
done or is its sub-buffer's newest step. A slot's env is ``slot // sub_size``. (The shared ring,
whose envs interleave in one circular storage, has to store links and env ids: 10 bytes a slot.)

``sample_index(0)`` and ``buf[:]`` list the sub-buffers one after another, each from its oldest
to its newest step, unfinished episodes included: every env's trajectory in time order, linked
one after the other as in Figure 4 of the Tianshou paper. Steps of different envs are not
interleaved by insertion time (that would need an insertion stamp per slot).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks.replay import EpisodeStats, ReplayBuffer

__all__ = ["PerEnvLayout", "VectorReplayBuffer"]

_BLOCK = 32  # lockstep adds whose slots one numpy call makes (see PerEnvLayout._lock_pos)


def _per_env_rank(envs: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rank, counts)``: how many earlier rows of the same env precede each row, and the rows
    of each env."""
    counts = np.bincount(envs, minlength=num_envs)
    order = np.argsort(envs, kind="stable")
    rank = np.empty(len(envs), dtype=np.int64)
    rank[order] = np.arange(len(envs)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank, counts


class PerEnvLayout:
    """One circular sub-buffer of ``size // num_envs`` slots per env (registered as
    ``"vector"``); ``maxsize`` is ``num_envs * (size // num_envs)``."""

    name = "vector"

    def __init__(self, size: int, num_envs: int = 1) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        sub_size = int(size) // int(num_envs)
        if sub_size < 1:
            raise ValueError(
                f"size={size} gives no slot to each of num_envs={num_envs} envs; the vector "
                "layout splits size evenly between envs, so make size >= num_envs"
            )
        self.sub_size = sub_size
        self.num_envs = int(num_envs)
        self.maxsize = sub_size * self.num_envs
        self.env_range = np.arange(self.num_envs, dtype=np.int64)
        self._env_bytes = self.env_range.tobytes()
        self._no_flags = bytes(self.num_envs)
        self._stats = EpisodeStats(self.num_envs)
        self.size = 0
        self._offset = self.env_range * sub_size  # [num_envs] first slot of each env
        self._ptr_a = np.zeros(self.num_envs, dtype=np.int64)  # next local slot per env
        self._count_a = np.zeros(self.num_envs, dtype=np.int64)  # valid slots per env
        # (ptr, count) while every sub-buffer has the same write position and fill (then a
        # step of all envs is one strided slice and _ptr_a/_count_a may be stale), else None
        self._lock: tuple[int, int] | None = (0, 0)
        # results of the next lockstep adds, made for up to _BLOCK adds at once (one numpy call
        # instead of one per add): (local slot p of the next add, first local slot of the
        # block, [k, num_envs] slots offsets + p, [k, *ep_rew shape] and [k, num_envs] zeros).
        # Each row is handed out once, to the add at its p, and never read again.
        self._lock_pos: tuple[int, int, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._ones = np.ones(self.num_envs, dtype=np.int64)
        self._span = (self.num_envs - 1) * sub_size + 1  # of the strided slice of one step
        self._fresh = True  # some env may be at the first step of an episode
        # lockstep adds that end no episode leave the running returns and lengths behind:
        # the rewards are in storage (local slots p0 .. p0 + k - 1 of every sub-buffer; k
        # stays below sub_size, so none is overwritten), and reading `stats` adds them first
        self._stat_k = 0
        self._stat_p0 = 0
        self._stat_cap = min(self.sub_size - 1, 1024)
        self._term: np.ndarray | None = None
        self._trunc: np.ndarray | None = None
        self._rew: np.ndarray | None = None
        self._rew_shape: tuple[int, ...] = (self.num_envs,)
        # (chunk, windows of terminated, of truncated) for steps_after, while bound
        self._windows: tuple[int, np.ndarray, np.ndarray] | None = None

    def options(self) -> dict[str, Any]:
        return {}

    def bind(self, terminated: np.ndarray, truncated: np.ndarray, rew: np.ndarray) -> None:
        self._sync_stats()
        self._term, self._trunc, self._rew = terminated, truncated, rew
        self._windows = None  # they view the old flags
        self._stats.shape_returns(rew.shape[1:])
        self._rew_shape = self._stats.rew.shape
        self._lock_pos = None  # its zero returns have the old shape

    # --- per-env write position and fill ------------------------------------------------------

    @property
    def ptr(self) -> np.ndarray:
        """``[num_envs]`` next local slot of each sub-buffer."""
        if self._lock is not None:
            self._ptr_a.fill(self._lock[0])
        return self._ptr_a

    @property
    def count(self) -> np.ndarray:
        """``[num_envs]`` valid slots of each sub-buffer."""
        if self._lock is not None:
            self._count_a.fill(self._lock[1])
        return self._count_a

    def _lock_of(self) -> tuple[int, int] | None:
        ptr, count = self._ptr_a, self._count_a
        if (ptr == ptr[0]).all() and (count == count[0]).all():
            return int(ptr[0]), int(count[0])
        return None

    @property
    def stats(self) -> EpisodeStats:
        """The running episode statistics (brought up to date on read)."""
        self._sync_stats()
        return self._stats

    def _sync_stats(self) -> None:
        k, p0 = self._stat_k, self._stat_p0
        if not k:
            return
        self._stat_k = 0
        local = p0 + np.arange(k)
        local[local >= self.sub_size] -= self.sub_size
        rows = self._offset[None, :] + local[:, None]  # [k, num_envs]
        self._stats.rew += self._rew[rows].sum(axis=0)  # type: ignore[index]
        self._stats.len += k

    # --- writing ----------------------------------------------------------------------------------

    def write(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one validated step of ``n`` envs into their sub-buffers."""
        sub, lock = self.sub_size, self._lock
        if lock is not None and n == self.num_envs and (
            envs is self.env_range or envs.tobytes() == self._env_bytes
        ):  # every env at the same local slot: the rows go to a strided slice
            p, c = lock
            where = slice(p, p + self._span, sub)
            for arr, value in writes:
                arr[where] = value
            # the slots (p + each env's offset) and the zeros returned, from the block
            cached = self._lock_pos
            if cached is None or cached[0] != p:
                cached = self._lockstep_block(p)
            p0, block, zero_rew, zero_len = cached[1:]
            k = p - p0
            pos = block[k]
            self._lock_pos = (p + 1, p0, block, zero_rew, zero_len) if k + 1 < len(block) else None
            self._lock = (0 if p + 1 == sub else p + 1, c + 1 if c < sub else c)
            if c < sub:
                self.size += n
            # the done flags as stored (a strided read of n bytes each)
            term = self._term[where]  # type: ignore[index]
            trunc = self._trunc[where]  # type: ignore[index]
            nf = self._no_flags
            stats = self._stats
            if term.tobytes() == nf and trunc.tobytes() == nf:  # no episode ends
                if self._fresh:  # envs at the start of an episode begin it here
                    np.copyto(stats.start, pos, where=stats.len == 0)
                    self._fresh = False
                if self._stat_k < self._stat_cap:  # the statistics follow later, in bulk
                    if self._stat_k == 0:
                        self._stat_p0 = p
                    self._stat_k += 1
                else:
                    self._sync_stats()
                    stats.len += self._ones
                    stats.rew += rew
                return pos, zero_rew[k], zero_len[k], stats.start.copy()
            self._sync_stats()
            done = term | trunc
            self._fresh = True
            return (pos, *stats.step(self.env_range, pos, done, np.count_nonzero(done), rew,
                                     False))

        self._sync_stats()
        ptr_a, count_a = self.ptr, self.count  # current
        self._lock = None
        ptr = ptr_a[envs]
        pos = self._offset[envs] + ptr
        for arr, value in writes:
            arr[pos] = value
        ptr += 1
        ptr[ptr == sub] = 0
        ptr_a[envs] = ptr
        count = count_a[envs]
        grown = count < sub
        if grown.any():
            count_a[envs] = count + grown
            self.size += int(np.count_nonzero(grown))
        self._lock = self._lock_of()
        self._fresh = True
        done = self._term[pos] | self._trunc[pos]  # type: ignore[index]
        return (pos, *self._stats.step(envs, pos, done, np.count_nonzero(done), rew, False))

    def _lockstep_block(self, p: int) -> tuple[int, int, np.ndarray, np.ndarray, np.ndarray]:
        """Results of the lockstep adds at local slots ``p .. p + k - 1`` (``k`` up to
        ``_BLOCK``, not past the end of the sub-buffers): their slots and zero rows."""
        k = min(_BLOCK, self.sub_size - p)
        block = np.add.outer(np.arange(p, p + k, dtype=np.int64), self._offset)
        zero_rew = np.zeros((k, *self._rew_shape))
        zero_len = np.zeros((k, self.num_envs), dtype=np.int64)
        return p, p, block, zero_rew, zero_len

    def extend(
        self, columns: list[tuple[np.ndarray, np.ndarray]], envs: np.ndarray, rew: np.ndarray,
        done: np.ndarray,
    ) -> np.ndarray:
        """Append rows to their envs' sub-buffers as if added step by step; an env with more
        than ``sub_size`` rows keeps its newest."""
        self._sync_stats()
        sub = self.sub_size
        ptr_a, count_a = self.ptr, self.count
        self._lock = None
        rank, per_env = _per_env_rank(envs, self.num_envs)
        local = ptr_a[envs] + rank
        pos = self._offset[envs] + local % sub  # as if added one by one
        self._stats.advance_rows(envs, rew, done, pos)
        keep = rank >= per_env[envs] - sub  # each env keeps its newest sub_size rows
        for arr, col in columns:
            arr[pos[keep]] = col[keep]
        ptr_a[:] = (ptr_a + per_env) % sub
        count_a[:] = np.minimum(count_a + per_env, sub)
        self.size = int(count_a.sum())
        self._lock = self._lock_of()
        self._fresh = True
        return pos[keep]

    def reset(self, keep_statistics: bool = False) -> None:
        self._sync_stats()  # their rewards are about to be overwritten
        self._ptr_a[:] = 0
        self._count_a[:] = 0
        self._lock = (0, 0)
        self._lock_pos = None
        self.size = 0
        self._fresh = True
        if not keep_statistics:
            self._stats.clear()

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray:
        """End every unfinished episode (of the envs ``env_ids``; None: of every env) at its
        newest step; return those slots."""
        idx = self.unfinished_index()
        if env_ids is not None and len(idx):
            idx = idx[np.isin(idx // self.sub_size, np.asarray(env_ids))]
        if len(idx):
            self._trunc[idx] = True  # type: ignore[index]
            self.stats.clear(idx // self.sub_size)
            self._fresh = True
        return idx

    # --- episode links, derived ---------------------------------------------------------------

    def _parts(self, index: Any) -> tuple[np.ndarray, np.ndarray, Any, Any]:
        """``(slots, local slots, ptr, count)`` for ``index`` (ptr and count of each slot's
        sub-buffer; plain ints in lockstep)."""
        if isinstance(index, slice):
            idx = np.arange(self.maxsize, dtype=np.int64)[index]
        else:
            idx = np.asarray(index)
            if idx.dtype.kind not in "iu":
                if idx.size:
                    raise IndexError(f"slot indices must be integers, got dtype {idx.dtype}")
                idx = idx.astype(np.int64)
            idx = idx.astype(np.int64, copy=False)
            if idx.size and (idx.min() < 0 or idx.max() >= self.maxsize):
                if idx.min() < -self.maxsize or idx.max() >= self.maxsize:
                    raise IndexError(
                        f"slot index out of range for a buffer of maxsize {self.maxsize}"
                    )
                idx = np.where(idx < 0, idx + self.maxsize, idx)
        sub = self.sub_size
        env = idx // sub
        local = idx - env * sub
        if self._lock is not None:
            return idx, local, self._lock[0], self._lock[1]
        return idx, local, self._ptr_a[env], self._count_a[env]

    def _is_plain(self, index: Any) -> bool:
        """Whether ``index`` is a non-empty int64 array of non-negative slots and there is data
        (the case sampling produces; ``prev`` / ``next`` then take a shorter path)."""
        return (
            type(index) is np.ndarray and index.dtype == np.int64 and index.ndim > 0
            and index.size > 0 and self._term is not None and index.min() >= 0
        )

    def _done_at(self, slots: np.ndarray) -> np.ndarray:
        return self._term[slots] | self._trunc[slots]  # type: ignore[index]

    def prev(self, index: Any) -> np.ndarray:
        """Slot of the previous step of the same episode; the slot itself at an episode's first
        (stored) step."""
        if self._lock is not None and self._is_plain(index):
            p, c = self._lock
            sub = self.sub_size
            local = index % sub
            back = index - 1
            back[local == 0] += sub
            first = self._term.take(back)  # type: ignore[union-attr]
            first |= self._trunc.take(back)  # type: ignore[union-attr]
            first |= local == (p if c == sub else 0)
            if c < sub:
                first |= local >= c
            return np.where(first, index, back)
        idx, local, ptr, count = self._parts(index)
        sub = self.sub_size
        back = idx - 1 + np.where(local == 0, sub, 0)
        first = (local == np.where(count == sub, ptr, 0)) | (local >= count)
        if self._term is not None:
            first |= self._done_at(back)
        out = np.where(first, idx, back)
        return out[()] if out.ndim == 0 else out

    def next(self, index: Any) -> np.ndarray:
        """Slot of the next step of the same episode; the slot itself at a done step or at the
        newest step of an episode that has not ended."""
        if self._lock is not None and self._is_plain(index):
            p, c = self._lock
            sub = self.sub_size
            local = index % sub
            end = self._term.take(index)  # type: ignore[union-attr]  # IndexError past the end
            end |= self._trunc.take(index)  # type: ignore[union-attr]
            end |= local == (p - 1 if p else sub - 1)
            if c < sub:
                end |= local >= c
            fwd = index + 1
            fwd[local == sub - 1] -= sub
            return np.where(end, index, fwd)
        idx, local, ptr, count = self._parts(index)
        sub = self.sub_size
        fwd = idx + 1 - np.where(local == sub - 1, sub, 0)
        end = (local == np.where(ptr == 0, sub - 1, ptr - 1)) | (local >= count)
        if self._term is not None:
            end |= self._done_at(idx)
        out = np.where(end, idx, fwd)
        return out[()] if out.ndim == 0 else out

    def steps_after(self, index: np.ndarray, chunk: int = 64) -> np.ndarray:
        """``[B]`` how many later steps of the same episode are stored after each slot of
        ``index`` (valid slots), found by scanning the done flags ``chunk`` slots at a time for
        all rows at once (a few rounds instead of one ``next`` call per step)."""
        index = np.asarray(index, dtype=np.int64)
        sub = self.sub_size
        local = index % sub
        base = index - local
        ptr = self.ptr[index // sub]
        limit = (ptr - 1 - local) % sub  # steps until the sub-buffer's newest
        out = limit.copy()
        if self._term is None or not len(index):
            return out
        chunk = max(1, min(int(chunk), sub))
        term_w, trunc_w = self._flag_windows(chunk)
        rows = np.arange(len(index))
        ks = np.arange(chunk)
        start = 0
        while len(rows):
            first = local[rows] + start  # local slot where each row's window starts
            first[first >= sub] -= sub  # (start <= limit < sub)
            inside = first <= sub - chunk  # the window does not wrap: one row of the windows
            first += base[rows]
            if inside.all():
                flags = term_w[first]
                flags |= trunc_w[first]
            else:
                flags = np.empty((len(rows), chunk), dtype=bool)
                ins, wrap = np.flatnonzero(inside), np.flatnonzero(~inside)
                flags[ins] = term_w[first[ins]] | trunc_w[first[ins]]
                w = rows[wrap]
                slots = base[w, None] + (local[w, None] + start + ks) % sub
                flags[wrap] = self._term.take(slots) | self._trunc.take(slots)  # type: ignore[union-attr]
            at = flags.argmax(axis=1)  # each window's first done flag (0 when it has none)
            left = limit[rows] - start  # steps to the newest, from the window's start
            found = flags[np.arange(len(rows)), at] & (at <= left)  # flags past it are stale
            out[rows[found]] = start + at[found]
            start += chunk
            rows = rows[~found & (left >= chunk)]  # else: no end before the newest step
        return out

    def _flag_windows(self, chunk: int) -> tuple[np.ndarray, np.ndarray]:
        """Read-only ``[maxsize - chunk + 1, chunk]`` views of the done flags whose row ``i``
        is slots ``i .. i + chunk - 1`` (so a window of flags is one row copy, not ``chunk``
        gathers); made once per bound storage."""
        cached = self._windows
        if cached is None or cached[0] != chunk:
            view = np.lib.stride_tricks.sliding_window_view
            cached = (chunk, view(self._term, chunk), view(self._trunc, chunk))
            self._windows = cached
        return cached[1], cached[2]

    def advance(self, index: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The slot ``steps`` later in each slot's sub-buffer (``steps <= steps_after``)."""
        index = np.asarray(index, dtype=np.int64)
        local = index % self.sub_size
        return index - local + (local + steps) % self.sub_size

    def _newest(self) -> np.ndarray:
        """``[num_envs]`` newest slot of each sub-buffer (meaningless where it is empty)."""
        ptr = self.ptr
        return self._offset + np.where(ptr == 0, self.sub_size - 1, ptr - 1)

    def unfinished_index(self) -> np.ndarray:
        """The newest slot of every env's episode that has not ended (in env id order)."""
        if self._term is None:
            return np.zeros(0, dtype=np.int64)
        newest = self._newest()[self.count > 0]
        return newest[~self._done_at(newest)]

    @property
    def env_id(self) -> np.ndarray:
        """``[maxsize]`` the env of each slot (``slot // sub_size``; computed, not stored)."""
        dtype = np.int16 if self.num_envs <= 2**15 else np.int64
        return np.repeat(self.env_range.astype(dtype), self.sub_size)

    # --- which slots are valid ------------------------------------------------------------------

    def valid_slots(self) -> Any:
        if self.size == self.maxsize:
            return slice(0, self.maxsize)
        return np.flatnonzero((np.arange(self.sub_size)[None, :] < self.count[:, None]).ravel())

    def time_order(self) -> np.ndarray:
        """Every valid slot: the sub-buffers in env order, each from oldest to newest."""
        sub, count = self.sub_size, self.count
        start = np.where(count == sub, self.ptr, 0)
        env = np.repeat(self.env_range, count)
        rank = np.arange(len(env)) - np.repeat(np.cumsum(count) - count, count)
        local = start[env] + rank
        local[local >= sub] -= sub
        return self._offset[env] + local

    def uniform(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """``batch_size`` uniformly random valid slots of all sub-buffers (with replacement)."""
        if self.size == self.maxsize:
            return rng.integers(self.maxsize, size=batch_size, dtype=np.int64)
        if self._lock is not None:  # every sub-buffer holds local slots 0 .. count - 1
            count = self._lock[1]
            r = rng.integers(self.size, size=batch_size, dtype=np.int64)
            env = r // count
            return r + env * (self.sub_size - count)
        # the r-th valid transition, counting sub-buffer by sub-buffer
        count = self._count_a
        r = rng.integers(self.size, size=batch_size, dtype=np.int64)
        cum = np.cumsum(count)
        env = np.searchsorted(cum, r, side="right")
        return self._offset[env] + r - (cum[env] - count[env])

    # --- files ----------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return {"size": self.size}

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ptr": self.ptr, "count": self.count, **self.stats.arrays()}

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        ptr = np.asarray(arrays["ptr"], dtype=np.int64)
        count = np.asarray(arrays["count"], dtype=np.int64)
        n, sub = self.num_envs, self.sub_size
        if ptr.shape != (n,) or count.shape != (n,):
            raise ValueError(f"ptr/count have shapes {ptr.shape}/{count.shape}, expected ({n},)")
        if (ptr < 0).any() or (ptr >= sub).any() or (count < 0).any() or (count > sub).any():
            raise ValueError(f"ptr/count outside sub-buffers of {sub} slots")
        self._stat_k = 0
        self._ptr_a[:] = ptr
        self._count_a[:] = count
        self.size = int(count.sum())
        self._stats.load_arrays(arrays)
        self._lock = self._lock_of()
        self._lock_pos = None
        self._fresh = True


class VectorReplayBuffer(ReplayBuffer):
    """A :class:`~rlblocks.replay.ReplayBuffer` with the per-env layout (one circular
    sub-buffer of ``size // num_envs`` slots per env); arguments as for ``ReplayBuffer``."""

    default_layout = PerEnvLayout

    @property
    def sub_size(self) -> int:
        """Slots of each env's sub-buffer."""
        return self.layout.sub_size  # type: ignore[attr-defined]
