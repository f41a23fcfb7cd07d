"""``VectorReplayBuffer``: one circular sub-buffer per env, all in one contiguous storage.

Slots ``[e * sub_size, (e + 1) * sub_size)`` belong to env ``e`` (``sub_size = size // num_envs``),
and each env overwrites only its own oldest steps, so a fast env never pushes a slow env's
episodes out of the buffer and each env's steps lie together in memory. Everything else is the base
:class:`~rlblocks.buffer.ReplayBuffer`: the same storage arrays, the same explicit episode links
(``prev`` / ``next`` never leave a sub-buffer), the same reads, returns and hdf5 files. Only slot
allocation, time order and uniform sampling differ.

Time order across sub-buffers comes from a per-slot insertion stamp, so ``sample_index(0)`` lists
every valid transition of every env in the order it was added (unfinished episodes included),
exactly as for the base buffer.

The common add, one step of every env in env-id order with no episode ending, while all
sub-buffers are at the same position ("lockstep"), only writes the data rows and the running
episode statistics. Its episode links, insertion stamps and write positions follow a pattern
(each env's chain continues into the same local slot), so they are written in bulk later: the
first read of any of that bookkeeping (``_prev``, ``_next``, ``_last``, ``_stamp``, ``_ptr``,
``_count`` are properties that catch up first) or any other kind of add. Every result is the
same as with step-by-step bookkeeping; the add costs about half as much.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlblocks.buffer import ReplayBuffer

__all__ = ["VectorReplayBuffer"]


def _nest(cols: dict[tuple[str, ...], Any], rows: slice) -> dict[str, Any]:
    """``{path: column}`` -> nested dict of ``column[rows]`` (the form ``add`` takes)."""
    out: dict[str, Any] = {}
    for path, col in cols.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = col[rows]
    return out


def _caught_up(name: str) -> property:
    """A bookkeeping array that lockstep adds may leave behind: reading it catches up first."""
    key = f"_{name}_array"

    def get(self: VectorReplayBuffer) -> np.ndarray:
        if self._pending:
            self._catch_up()
        return self.__dict__[key]

    def set(self: VectorReplayBuffer, value: np.ndarray) -> None:
        self.__dict__[key] = value

    return property(get, set, doc=f"``{name}``, with pending lockstep adds applied")


class VectorReplayBuffer(ReplayBuffer):
    """Replay buffer with one circular sub-buffer of ``size // num_envs`` slots per env.

    Args are those of :class:`~rlblocks.buffer.ReplayBuffer`; ``maxsize`` is
    ``num_envs * (size // num_envs)``. An add writes one step of several envs in one call
    (``env_ids`` distinct), each row into its env's sub-buffer.
    """

    _META_ARRAYS = (*ReplayBuffer._META_ARRAYS, "ptr", "count", "stamp")

    # bookkeeping that lockstep adds write in bulk (see the module docstring)
    _prev = _caught_up("prev")
    _next = _caught_up("next")
    _last = _caught_up("last")
    _stamp = _caught_up("stamp")
    _ptr = _caught_up("ptr")
    _count = _caught_up("count")
    _pending = 0  # lockstep adds whose bookkeeping is not written yet
    _STAMP_LIMIT = 2**31 - 1  # insertion stamps are int32

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
        super().__init__(
            sub_size * int(num_envs), num_envs, stack_num, ignore_obs_next, seed, storage, path
        )
        self.sub_size = sub_size
        self._offset = self._env_range * sub_size  # [num_envs] first slot of each sub-buffer
        self._ptr = np.zeros(self.num_envs, dtype=np.int64)  # [num_envs] next local slot
        self._count = np.zeros(self.num_envs, dtype=np.int64)  # [num_envs] valid slots
        # [maxsize] insertion counter; int32 (4 bytes a slot), renumbered before it could
        # overflow (see _rebase_stamps)
        self._stamp = np.zeros(self.maxsize, dtype=np.int32)
        self._clock = 0
        self._rebase_at = self._STAMP_LIMIT - 2 * self.maxsize
        # while fewer than this many slots are valid, no sub-buffer can be full
        self._fill_bound = sub_size
        self._lockstep = True  # see _is_lockstep
        self._claimed: tuple[np.ndarray, np.ndarray] | None = None
        self._env[:] = np.repeat(self._env_range, sub_size)
        self._env_varies = False  # each slot belongs to one env for good
        # pending lockstep adds: first local slot, fill and clock before them; python mirrors of
        # the write position and fill while some are pending
        self._pend_from = (0, 0, 0)
        self._lz_ptr = self._lz_count = 0
        self._pending_cap = min(sub_size - 1, 4096)  # pending adds never wrap a sub-buffer
        self._fresh = True  # some env may be at the start of an episode (ep_start to set)
        self._no_flags = np.zeros(self.num_envs, dtype=bool).tobytes()
        if type(self).__init__ is VectorReplayBuffer.__init__:
            self._reopen_if_saved()

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "clock": self._clock}

    def _set_state(self, state: dict[str, Any]) -> None:
        super()._set_state(state)
        self._clock = int(state["clock"])
        self._lockstep = self._is_lockstep()

    # --- adds -----------------------------------------------------------------------------------

    def add(
        self, batch: Any, env_ids: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """See :meth:`ReplayBuffer.add`. One step of every env in env-id order that ends no
        episode, while the sub-buffers are in lockstep, takes a shorter path (same results)."""
        if self._clock >= self._rebase_at:
            self._rebase_stamps()
        if self._lockstep and self._pending_cap > 0:
            writes = self._fast_writes(batch, env_ids)
            if writes is not None and self._no_episode_ends(batch):
                return self._lockstep_add(writes, batch["rew"])
        if self._pending:
            self._catch_up()
        self._fresh = True
        return super().add(batch, env_ids)

    def _no_episode_ends(self, batch: dict[str, np.ndarray]) -> bool:
        term, trunc = batch["terminated"], batch["truncated"]
        if term.dtype == np.bool_ and trunc.dtype == np.bool_:
            return term.tobytes() == self._no_flags and trunc.tobytes() == self._no_flags
        return not (term.any() or trunc.any())

    def _lockstep_add(
        self, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one step of every env; links, stamps and positions wait (``_catch_up``)."""
        if self._pending >= self._pending_cap:
            self._catch_up()
        n, sub = self.num_envs, self.sub_size
        if self._pending == 0:
            p, count = int(self._ptr[0]), int(self._count[0])
            self._pend_from = (p, count, self._clock)
        else:
            p, count = self._lz_ptr, self._lz_count
        where = slice(p, p + (n - 1) * sub + 1, sub)
        for arr, value in writes:
            arr[where] = value
        pos = self._offset + p
        if self._fresh:  # envs at the start of an episode begin it here
            np.copyto(self._ep_start, pos, where=self._ep_len == 0)
            self._fresh = False
        self._ep_len += 1
        self._ep_rew += rew
        self._pending += 1
        self._lz_ptr = 0 if p + 1 == sub else p + 1
        if count < sub:
            self._lz_count = count + 1
            self._size += n
        else:
            self._lz_count = count
        self._clock += n
        zeros = np.zeros(n, dtype=np.int64)
        return pos, np.zeros(self._ep_rew.shape), zeros, self._ep_start.copy()

    def _rebase_stamps(self) -> None:
        """Renumber the valid slots' stamps ``0, 1, ...`` in their order, so the int32 counter
        restarts far from overflow (once per ~2e9 added transitions; the order is unchanged)."""
        if self._pending:
            self._catch_up()
        valid = self._valid_slots()
        valid = np.arange(self.maxsize)[valid] if isinstance(valid, slice) else valid
        order = valid[np.argsort(self._stamp[valid], kind="stable")]
        stamp = self._stamp
        stamp[:] = 0
        stamp[order] = np.arange(len(order), dtype=stamp.dtype)
        self._clock = len(order)

    def _catch_up(self) -> None:
        """Write the links, stamps and positions of the pending lockstep adds, exactly as
        step-by-step adds would have left them."""
        k = self._pending
        self._pending = 0
        self._fresh = True
        p0, c0, clock0 = self._pend_from
        d = self.__dict__
        prev, nxt, last = d["_prev_array"], d["_next_array"], d["_last_array"]
        sub, n, maxsize = self.sub_size, self.num_envs, self.maxsize
        steps = np.arange(k, dtype=np.int64)
        slots = (p0 + steps)[:, None] + self._offset[None, :]  # [k, n]; p0 + k <= sub - 1 + p0
        slots[slots - self._offset >= sub] -= sub  # wrap within each sub-buffer
        first_over = max(0, sub - c0)  # adds from here on overwrote valid transitions
        if first_over < k:
            old = slots[first_over:].ravel()
            succ = nxt[old]
            moved = succ[succ != old]
            prev[moved] = moved  # their episode lost its beginning
            last[np.isin(last, old)] = maxsize  # a chain whose newest step is gone
        before = last.copy()
        first = slots[0]
        prev[first] = np.where(before != maxsize, before, first)
        nxt[before] = first  # envs without a chain write into the spare slot
        if k > 1:
            prev[slots[1:]] = slots[:-1]
            nxt[slots[:-1]] = slots[1:]
        nxt[slots[-1]] = slots[-1]
        last[:] = slots[-1]
        d["_stamp_array"][slots] = clock0 + steps[:, None] * n + self._env_range[None, :]
        d["_ptr_array"].fill(self._lz_ptr)
        d["_count_array"].fill(self._lz_count)

    # --- slot allocation ----------------------------------------------------------------------

    def _claim_slots(self, envs: np.ndarray, n: int) -> tuple[Any, np.ndarray, np.ndarray | None]:
        sub = self.sub_size
        if self._lockstep and (
            envs is self._env_range or (n == self.num_envs and (envs == self._env_range).all())
        ):
            # every env at the same local slot: the rows go to a strided slice (fast writes)
            p = int(self._ptr[0])
            pos = self._offset + p
            self._claimed = None
            where = slice(p, p + (n - 1) * sub + 1, sub)
            return where, pos, (pos if self._count[0] == sub else None)
        ptr = self._ptr[envs]
        pos = self._offset[envs] + ptr
        # kept for _commit_slots, which runs once the rows are written
        self._claimed = (ptr, pos)
        if self._size + n <= self.maxsize and self._size < self._fill_bound:
            return pos, pos, None  # no sub-buffer can be full yet
        full = self._count[envs] == self.sub_size
        if full.any():
            return pos, pos, pos[full]
        return pos, pos, None

    def _commit_slots(self, envs: np.ndarray, n: int) -> None:
        if self._claimed is None:  # lockstep: all envs advance together
            p = int(self._ptr[0])
            self._stamp[p :: self.sub_size] = self._clock + self._env_range
            self._clock += n
            self._ptr.fill(0 if p + 1 == self.sub_size else p + 1)
            if self._size < self.maxsize:
                self._count += 1
                self._size += n
            return
        ptr, pos = self._claimed
        self._stamp[pos] = self._clock + self._env_range[:n]
        self._clock += n
        ptr += 1
        self._ptr[envs] = np.where(ptr == self.sub_size, 0, ptr)
        if self._size < self.maxsize:
            count = self._count[envs]
            grown = count < self.sub_size
            self._size += int(np.count_nonzero(grown))
            self._count[envs] = count + grown
        self._lockstep = self._is_lockstep()

    def _is_lockstep(self) -> bool:
        """Whether every sub-buffer has the same write position and fill (then a step of all
        envs writes a strided slice)."""
        return bool((self._ptr == self._ptr[0]).all() and (self._count == self._count[0]).all())

    def _valid_mask(self) -> np.ndarray:
        local = self._slots - np.repeat(self._offset, self.sub_size)
        return local < np.repeat(self._count, self.sub_size)

    def _valid_slots(self) -> Any:
        if self._size == self.maxsize:
            return slice(0, self.maxsize)
        return np.flatnonzero(self._valid_mask())

    def _time_order(self) -> np.ndarray:
        valid = self._slots if self._size == self.maxsize else np.flatnonzero(self._valid_mask())
        return valid[np.argsort(self._stamp[valid], kind="stable")]

    # --- sampling -----------------------------------------------------------------------------

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0``: that many uniformly random valid slots of all sub-buffers (with
        replacement); ``0``: every valid slot in insertion order; ``< 0``: an empty array."""
        if batch_size <= 0:
            return super().sample_index(batch_size)
        if self._size == 0:
            raise ValueError("cannot sample from an empty buffer; add transitions first")
        if self._size == self.maxsize:
            return self._rng.integers(self.maxsize, size=batch_size, dtype=np.int64)
        # the r-th valid transition, counting sub-buffer by sub-buffer
        r = self._rng.integers(self._size, size=batch_size, dtype=np.int64)
        cum = np.cumsum(self._count)
        env = np.searchsorted(cum, r, side="right")
        return self._offset[env] + r - (cum[env] - self._count[env])

    # --- bulk operations ------------------------------------------------------------------------

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Append ``other``'s valid transitions in its time order; return the slots written.

        Same meaning as :meth:`ReplayBuffer.update`: each transition lands in its env's
        sub-buffer and continues that env's episode as if it had been added step by step.
        """
        if other is self:
            raise ValueError("a buffer cannot update from itself")
        if not isinstance(other, ReplayBuffer):
            raise TypeError(f"update() takes a ReplayBuffer, got {type(other).__name__}")
        oidx = other.sample_index(0)
        if len(oidx) == 0 or other._data is None:
            return np.zeros(0, dtype=np.int64)
        cols = other._raw_columns(oidx, with_obs_next=not self.ignore_obs_next)
        envs = other._env[oidx]
        if envs.max() >= self.num_envs:
            raise ValueError(
                f"other holds env ids up to {int(envs.max())}, but this buffer was made for "
                f"num_envs={self.num_envs}"
            )
        # cut the time-ordered rows into runs without a repeated env: one add() each
        out, start, seen = [], 0, set()
        for j, e in enumerate(envs.tolist()):
            if e in seen:
                out.append(self.add(_nest(cols, slice(start, j)), env_ids=envs[start:j])[0])
                start, seen = j, set()
            seen.add(e)
        out.append(self.add(_nest(cols, slice(start, None)), env_ids=envs[start:])[0])
        return np.concatenate(out)

    def reset(self, keep_statistics: bool = False) -> None:
        super().reset(keep_statistics)
        self._env[:] = np.repeat(self._env_range, self.sub_size)
        self._ptr[:] = 0
        self._count[:] = 0
        self._clock = 0
        self._lockstep = True

    # --- files ----------------------------------------------------------------------------------

    def _write_hdf5(self, f: Any, compression: str | None) -> None:
        super()._write_hdf5(f, compression)
        f.attrs["clock"] = self._clock

    def _read_hdf5(self, f: Any) -> None:
        super()._read_hdf5(f)
        self._clock = int(f.attrs["clock"])
        self._lockstep = self._is_lockstep()
