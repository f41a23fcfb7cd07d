"""``VectorReplayBuffer``: one circular sub-buffer per env, all in one contiguous storage.

Slots ``[e * sub_size, (e + 1) * sub_size)`` belong to env ``e`` (``sub_size = size // num_envs``),
and each env overwrites only its own oldest steps, so a fast env never pushes a slow env's
episodes out of the buffer and each env's steps lie together in memory. Storage, reads, returns
and hdf5 files are those of the base :class:`~rlblocks.buffer.ReplayBuffer`.

Nothing but the data is stored per slot. Inside a sub-buffer an env's steps are consecutive
slots (circularly), so the episode links follow from the done flags and each sub-buffer's write
position and fill: the step before slot ``i`` is the slot before it, unless that one is done or
``i`` is its sub-buffer's oldest step; the step after ``i`` is the slot after it, unless ``i`` is
done or is its sub-buffer's newest step. A slot's env is ``slot // sub_size``. (The base buffer,
whose envs share one circular storage, has to store links and env ids: 10 bytes a slot.)

``sample_index(0)`` and ``buf[:]`` list the sub-buffers one after another, each from its oldest
to its newest step, unfinished episodes included: every env's trajectory in time order, linked
one after the other as in Figure 4 of the Tianshou paper. Steps of different envs are not
interleaved by insertion time (that would need an insertion stamp per slot).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks.buffer import ReplayBuffer

__all__ = ["VectorReplayBuffer", "add_in_runs"]


def _nest(cols: dict[tuple[str, ...], Any], rows: Any) -> dict[str, Any]:
    """``{path: column}`` -> nested dict of ``column[rows]`` (the form ``add`` takes)."""
    out: dict[str, Any] = {}
    for path, col in cols.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = col[rows]
    return out


def _per_env_rank(envs: np.ndarray, num_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rank, counts)``: how many earlier rows of the same env precede each row, and the rows
    of each env."""
    counts = np.bincount(envs, minlength=num_envs)
    order = np.argsort(envs, kind="stable")
    rank = np.empty(len(envs), dtype=np.int64)
    rank[order] = np.arange(len(envs)) - np.repeat(np.cumsum(counts) - counts, counts)
    return rank, counts


def add_in_runs(buf: ReplayBuffer, other: ReplayBuffer) -> np.ndarray:
    """Add ``other``'s valid transitions to ``buf`` through ``buf.add``, keeping each env's
    order: round ``k`` adds the ``k``-th transition of every env that has one (one ``add`` per
    round). Returns the slots ``add`` reported, in the order the rows were added."""
    rows = buf._rows_of(other)
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    cols, envs = rows
    rank, _ = _per_env_rank(envs, int(envs.max()) + 1)
    order = np.lexsort((envs, rank))  # round by round, env ids ascending inside a round
    bounds = np.flatnonzero(np.diff(rank[order])) + 1
    out = [buf.add(_nest(cols, rows), env_ids=envs[rows])[0] for rows in np.split(order, bounds)]
    return np.concatenate(out)


def _per_env_position(which: int, doc: str) -> property:
    """``_ptr`` (which=0) or ``_count`` (1): kept current on read from the lockstep pair; setting
    one (loading a buffer) recomputes whether the sub-buffers are in lockstep."""
    key = ("_ptr_a", "_count_a")[which]

    def get(self: VectorReplayBuffer) -> np.ndarray:
        arr = self.__dict__[key]
        if self._lock is not None:
            arr.fill(self._lock[which])
        return arr

    def set(self: VectorReplayBuffer, value: np.ndarray) -> None:
        self.__dict__[key] = np.array(value, dtype=np.int64)
        self._lock = self._lock_of()

    return property(get, set, doc=doc + " (kept current on read)")


def _running_stat(key: str, doc: str) -> property:
    """``_ep_len`` / ``_ep_rew``: lockstep adds may leave them behind; reading or replacing one
    adds the pending steps first (see ``_sync_stats``)."""

    def get(self: VectorReplayBuffer) -> np.ndarray:
        if self._stat_k:
            self._sync_stats()
        return self.__dict__[key]

    def set(self: VectorReplayBuffer, value: np.ndarray) -> None:
        if self._stat_k:
            self._sync_stats()
        self.__dict__[key] = value
        if key == "_ep_rew_a":
            self._rew_shape = value.shape

    return property(get, set, doc=doc)


class VectorReplayBuffer(ReplayBuffer):
    """Replay buffer with one circular sub-buffer of ``size // num_envs`` slots per env.

    Args are those of :class:`~rlblocks.buffer.ReplayBuffer`; ``maxsize`` is
    ``num_envs * (size // num_envs)``. An add writes one step of several envs in one call
    (``env_ids`` distinct), each row into its env's sub-buffer.
    """

    _META_ARRAYS = ("ep_rew", "ep_len", "ep_start", "ptr", "count")

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
        storage: str = "memory",
        path: Any = None,
    ) -> None:
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        sub_size = int(size) // int(num_envs)
        if sub_size < 1:
            raise ValueError(
                f"size={size} gives no slot to each of num_envs={num_envs} envs; the vector "
                "buffer splits size evenly between envs, so make size >= num_envs"
            )
        self.sub_size = sub_size
        super().__init__(
            sub_size * int(num_envs), num_envs, stack_num, ignore_obs_next, seed, storage, path
        )
        self._no_flags = bytes(self.num_envs)
        if type(self).__init__ is VectorReplayBuffer.__init__:
            self._reopen_if_saved()

    # --- per-env write position and fill -----------------------------------------------------

    def _init_links(self) -> None:
        self._offset = self._env_range * self.sub_size  # [num_envs] first slot of each env
        self._ptr_a = np.zeros(self.num_envs, dtype=np.int64)  # next local slot per env
        self._count_a = np.zeros(self.num_envs, dtype=np.int64)  # valid slots per env
        # (ptr, count) while every sub-buffer has the same write position and fill (then a
        # step of all envs is one strided slice and _ptr_a/_count_a may be stale), else None
        self._lock: tuple[int, int] | None = (0, 0)
        # (p, offsets + p) for the next lockstep add (a cache; handed out, never kept)
        self._lock_pos: tuple[int, np.ndarray] | None = None
        self._ones = np.ones(self.num_envs, dtype=np.int64)
        self._fresh = True  # some env may be at the first step of an episode
        self._stat_cap = min(self.sub_size - 1, 1024)

    _ptr = _per_env_position(0, "``[num_envs]`` next local slot of each sub-buffer")
    _count = _per_env_position(1, "``[num_envs]`` valid slots of each sub-buffer")

    def _lock_of(self) -> tuple[int, int] | None:
        ptr, count = self._ptr_a, self._count_a
        if len(count) != self.num_envs or len(ptr) != self.num_envs:
            return None  # half-loaded state (the other array follows)
        if (ptr == ptr[0]).all() and (count == count[0]).all():
            return int(ptr[0]), int(count[0])
        return None

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        self._lock = self._lock_of()
        self._fresh = True

    # --- adds -----------------------------------------------------------------------------------

    def _write_step(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one validated step of ``n`` envs into their sub-buffers."""
        sub, lock = self.sub_size, self._lock
        if lock is not None and n == self.num_envs and (
            envs is self._env_range or envs.tobytes() == self._env_bytes
        ):  # every env at the same local slot: the rows go to a strided slice
            p, c = lock
            where = slice(p, p + (n - 1) * sub + 1, sub)
            for arr, value in writes:
                arr[where] = value
            # the slots: p + each env's offset (array + array is cheaper than array + int)
            cached = self._lock_pos
            pos = cached[1] if cached is not None and cached[0] == p else self._offset + p
            self._lock_pos = (p + 1, pos + self._ones) if p + 1 < sub else None
            self._lock = (0 if p + 1 == sub else p + 1, c + 1 if c < sub else c)
            if c < sub:
                self._size += n
            # the flags as given when they are bool arrays, else as stored
            t_at, u_at = self._flag_at
            term, trunc = writes[t_at][1], writes[u_at][1]
            if type(term) is not np.ndarray or term.dtype != np.bool_ or term.ndim != 1:
                term = self._term[where]
            if type(trunc) is not np.ndarray or trunc.dtype != np.bool_ or trunc.ndim != 1:
                trunc = self._trunc[where]
            nf = self._no_flags
            if term.tobytes() == nf and trunc.tobytes() == nf:  # no episode ends
                if self._fresh:  # envs at the start of an episode begin it here
                    np.copyto(self._ep_start, pos, where=self._ep_len == 0)
                    self._fresh = False
                if self._stat_k < self._stat_cap:  # the statistics follow later, in bulk
                    if self._stat_k == 0:
                        self._stat_p0 = p
                    self._stat_k += 1
                else:
                    self._ep_len += self._ones
                    self._ep_rew += rew
                return pos, np.zeros(self._rew_shape), np.zeros(n, np.int64), \
                    self._ep_start.copy()
            done = self._term[where] | self._trunc[where]
            self._fresh = True
            return (pos, *self._episode_stats(
                self._env_range, pos, done, np.count_nonzero(done), rew, False))

        ptr_a, count_a = self._ptr, self._count  # current
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
            self._size += int(np.count_nonzero(grown))
        self._lock = self._lock_of()
        self._fresh = True
        done = self._term[pos] | self._trunc[pos]
        return (pos, *self._episode_stats(envs, pos, done, np.count_nonzero(done), rew, False))

    # --- running episode statistics, possibly behind ------------------------------------------

    # Lockstep adds that end no episode leave the running returns and lengths behind: the
    # rewards are in storage (local slots p0 .. p0 + k - 1 of every sub-buffer; k stays below
    # sub_size, so none is overwritten), and any read of the statistics adds them first.
    _stat_k = 0  # lockstep steps not yet in _ep_len / _ep_rew
    _stat_p0 = 0  # local slot of the first of them
    _stat_cap = 0  # most steps left behind (0: none)

    def _sync_stats(self) -> None:
        k, p0 = self._stat_k, self._stat_p0
        self._stat_k = 0
        local = p0 + np.arange(k)
        local[local >= self.sub_size] -= self.sub_size
        rows = self._offset[None, :] + local[:, None]  # [k, num_envs]
        d = self.__dict__
        d["_ep_rew_a"] += self._data["rew"][rows].sum(axis=0)  # type: ignore[index]
        d["_ep_len_a"] += k

    _ep_len = _running_stat("_ep_len_a", "running episode lengths per env")
    _ep_rew = _running_stat("_ep_rew_a", "running episode returns per env")

    # --- episode links, derived -----------------------------------------------------------------

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
            and index.size > 0 and self._data is not None and index.min() >= 0
        )

    def _done_at(self, slots: np.ndarray) -> np.ndarray:
        return self._term[slots] | self._trunc[slots]

    def prev(self, index: Any) -> np.ndarray:
        """Slot of the previous step of the same episode; the slot itself at an episode's first
        (stored) step."""
        if self._lock is not None and self._is_plain(index):
            p, c = self._lock
            sub = self.sub_size
            local = index % sub
            back = index - 1
            back[local == 0] += sub
            first = self._term.take(back)
            first |= self._trunc.take(back)
            first |= local == (p if c == sub else 0)
            if c < sub:
                first |= local >= c
            return np.where(first, index, back)
        idx, local, ptr, count = self._parts(index)
        sub = self.sub_size
        back = idx - 1 + np.where(local == 0, sub, 0)
        first = (local == np.where(count == sub, ptr, 0)) | (local >= count)
        if self._data is not None:
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
            end = self._term.take(index)  # raises IndexError past the last slot
            end |= self._trunc.take(index)
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
        if self._data is not None:
            end |= self._done_at(idx)
        out = np.where(end, idx, fwd)
        return out[()] if out.ndim == 0 else out

    def _steps_after(self, index: np.ndarray, chunk: int = 32) -> np.ndarray:
        """``[B]`` how many later steps of the same episode are stored after each slot of
        ``index`` (int64, valid slots): ``next`` walked to the episode's end or its newest
        step, found by scanning the done flags ``chunk`` slots at a time for all rows at once
        (a few rounds instead of one ``next`` call per step)."""
        sub = self.sub_size
        local = index % sub
        base = index - local
        ptr = self._ptr[index // sub]
        limit = (ptr - 1 - local) % sub  # steps until the sub-buffer's newest
        out = limit.copy()
        rows = np.arange(len(index))
        ks = np.arange(chunk)
        start = 0
        while len(rows):
            k = start + ks  # [chunk] offsets from each row's slot
            slots = base[rows, None] + (local[rows, None] + k) % sub
            flags = self._term.take(slots) | self._trunc.take(slots)
            flags &= k <= limit[rows, None]
            hit = flags.any(axis=1)
            out[rows[hit]] = start + flags[hit].argmax(axis=1)
            start += chunk
            rows = rows[~hit & (limit[rows] >= start)]
        return out

    def _advance(self, index: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The slot ``steps`` later in each slot's sub-buffer (no episode check)."""
        local = index % self.sub_size
        return index - local + (local + steps) % self.sub_size

    def _newest(self) -> np.ndarray:
        """``[num_envs]`` newest slot of each sub-buffer (meaningless where it is empty)."""
        ptr = self._ptr
        return self._offset + np.where(ptr == 0, self.sub_size - 1, ptr - 1)

    def unfinished_index(self) -> np.ndarray:
        """The newest slot of every env's episode that has not ended (in env id order)."""
        if self._data is None:
            return np.zeros(0, dtype=np.int64)
        newest = self._newest()[self._count > 0]
        return newest[~self._done_at(newest)]

    def truncate_unfinished(self) -> np.ndarray:
        """Mark the newest step of every unfinished episode as truncated and end it there (e.g.
        after loading a buffer whose envs restart); return those slots."""
        idx = self.unfinished_index()
        if len(idx):
            self._data["truncated"][idx] = True  # type: ignore[index]
            envs = idx // self.sub_size
            self._ep_rew[envs] = 0.0
            self._ep_len[envs] = 0
            self._fresh = True
        return idx

    @property
    def env_id(self) -> np.ndarray:
        """``[maxsize]`` the env of each slot (``slot // sub_size``; computed, not stored)."""
        dtype = np.int16 if self.num_envs <= 2**15 else np.int64
        return np.repeat(self._env_range.astype(dtype), self.sub_size)

    # --- which slots are valid ------------------------------------------------------------------

    def _valid_mask(self) -> np.ndarray:
        return (np.arange(self.sub_size)[None, :] < self._count[:, None]).ravel()

    def _valid_slots(self) -> Any:
        if self._size == self.maxsize:
            return slice(0, self.maxsize)
        return np.flatnonzero(self._valid_mask())

    def _time_order(self) -> np.ndarray:
        """Every valid slot: the sub-buffers in env order, each from oldest to newest."""
        sub, count = self.sub_size, self._count
        start = np.where(count == sub, self._ptr, 0)
        env = np.repeat(self._env_range, count)
        rank = np.arange(len(env)) - np.repeat(np.cumsum(count) - count, count)
        local = start[env] + rank
        local[local >= sub] -= sub
        return self._offset[env] + local

    # --- sampling -----------------------------------------------------------------------------

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0``: that many uniformly random valid slots of all sub-buffers (with
        replacement); ``0``: every valid slot, env by env, each env's in time order;
        ``< 0``: an empty array."""
        if batch_size <= 0:
            return super().sample_index(batch_size)
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer; add transitions first")
        if self._size == self.maxsize:
            return self._rng.integers(self.maxsize, size=batch_size, dtype=np.int64)
        if self._lock is not None:  # every sub-buffer holds local slots 0 .. count - 1
            count = self._lock[1]
            r = self._rng.integers(self._size, size=batch_size, dtype=np.int64)
            env = r // count
            return r + env * (self.sub_size - count)
        # the r-th valid transition, counting sub-buffer by sub-buffer
        count = self._count_a
        r = self._rng.integers(self._size, size=batch_size, dtype=np.int64)
        cum = np.cumsum(count)
        env = np.searchsorted(cum, r, side="right")
        return self._offset[env] + r - (cum[env] - count[env])

    # --- bulk operations ------------------------------------------------------------------------

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Append ``other``'s valid transitions; return the slots written.

        Each transition lands in its env's sub-buffer and continues that env's episode exactly
        as if it had been added step by step (in ``other``'s order for that env); running
        episode statistics advance the same way. Only the transitions that fit stay: an env
        with more than ``sub_size`` of them keeps its newest.
        """
        rows = self._rows_of(other)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        cols, envs = rows
        return self._append(cols, envs, "the other buffer")

    def _append(self, cols: dict[tuple[str, ...], np.ndarray], envs: np.ndarray,
                what: str) -> np.ndarray:
        if self._data is None:
            self._allocate(cols, single=False, n=len(envs))
        if set(cols) != {p for p, _, _ in self._leaves}:
            raise self._key_error(set(cols), what)
        sub = self.sub_size
        ptr_a, count_a = self._ptr, self._count
        self._lock = None
        rank, per_env = _per_env_rank(envs, self.num_envs)
        local = ptr_a[envs] + rank
        pos = self._offset[envs] + local % sub  # as if added one by one
        done = cols[("terminated",)] | cols[("truncated",)]
        self._advance_episode_stats(envs, cols[("rew",)], done, pos)
        keep = rank >= per_env[envs] - sub  # each env keeps its newest sub_size rows
        for p, arr, _ in self._leaves:
            arr[pos[keep]] = cols[p][keep]
        ptr_a[:] = (ptr_a + per_env) % sub
        count_a[:] = np.minimum(count_a + per_env, sub)
        self._size = int(count_a.sum())
        self._lock = self._lock_of()
        self._fresh = True
        return pos[keep]

    def _reset_links(self) -> None:
        if self._stat_k:  # their rewards are about to be overwritten
            self._sync_stats()
        self._ptr_a[:] = 0
        self._count_a[:] = 0
        self._lock = (0, 0)
        self._fresh = True

    # --- files ----------------------------------------------------------------------------------

    def _read_hdf5(self, f: Any) -> None:
        super()._read_hdf5(f)
        self._lock = self._lock_of()
        self._fresh = True
