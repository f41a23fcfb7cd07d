"""Replay layouts: where the rows of an add go, and the episode structure over them.

A :class:`~rlblocks.replay.Layout` owns the slots of a :class:`~rlblocks.replay.ReplayBuffer`:
which slot each env's next step is written to, which steps are valid, the episode links
(``prev`` / ``next``) and the running episode statistics. The buffer owns the storage arrays and
hands the layout a step to write as ``(storage array, value)`` pairs, so a layout may write rows
in whatever form is fastest for it (a slice, a strided slice, fancy indices).

:class:`SharedRing` is core's default: one circular storage that every env writes into in
insertion order. Since several envs' steps interleave there, every slot stores its episode links
and env id (4 + 4 + 2 bytes a slot): ``prev(i) == i`` at the first stored step of an episode,
``next(i) == i`` at a done step or at the newest step of an episode that has not ended. Frame
stacking, ``obs_next`` rebuilding, GAE and n-step returns all follow these links, so they never
cross an episode boundary or mix envs (Figure 4 of the Tianshou paper, for interleaved envs).
The per-env layout (one circular sub-buffer per env) is the ``rlblocks-buffer-vector`` plugin.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["EpisodeStats", "SharedRing"]


class EpisodeStats:
    """Running return, length and first slot of every env's episode in progress.

    Shared by layouts: :meth:`step` advances them by one add and reports what ``add`` returns;
    :meth:`advance_rows` advances them over rows appended in bulk, exactly as one-by-one adds
    would."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = int(num_envs)
        self.rew = np.zeros(self.num_envs, dtype=np.float64)  # [num_envs, *rew_item_shape]
        self.len = np.zeros(self.num_envs, dtype=np.int64)
        self.start = np.zeros(self.num_envs, dtype=np.int64)

    def shape_returns(self, rew_item: tuple[int, ...]) -> None:
        """Make the running returns ``[num_envs, *rew_item]`` (a reward with components)."""
        if self.rew.shape[1:] != tuple(rew_item):
            self.rew = np.zeros((self.num_envs, *rew_item), dtype=np.float64)

    def clear(self, envs: Any = slice(None)) -> None:
        """Forget the episodes in progress of ``envs`` (all by default)."""
        self.rew[envs] = 0.0
        self.len[envs] = 0
        if isinstance(envs, slice):
            self.start[envs] = 0

    def step(
        self, envs: np.ndarray, pos: np.ndarray, done_mask: np.ndarray, any_done: int,
        rew: Any, every: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance the episodes of ``envs`` by one step written at ``pos``; return add()'s
        ``(ep_rew, ep_len, ep_start)`` (``every``: envs is all envs in id order)."""
        n = len(pos)
        if every and not any_done:  # in place; nothing to report
            np.copyto(self.start, pos, where=self.len == 0)
            self.len += 1
            self.rew += rew
            zeros = np.zeros(n, dtype=np.int64)
            return np.zeros(self.rew.shape), zeros, self.start.copy()
        ep_len = self.len[envs]
        start = self.start[envs]
        np.copyto(start, pos, where=ep_len == 0)
        self.start[envs] = start
        ep_len += 1
        self.len[envs] = ep_len
        ep_rew = self.rew[envs]
        ep_rew += rew
        self.rew[envs] = ep_rew
        if any_done:
            ended = envs[done_mask]
            self.rew[ended] = 0.0
            self.len[ended] = 0
            ep_len *= done_mask
            ep_rew[~done_mask] = 0.0
        else:
            ep_len = np.zeros(n, dtype=np.int64)
            ep_rew = np.zeros(ep_rew.shape)
        return ep_rew, ep_len, start

    def advance_rows(
        self, envs: np.ndarray, rew: np.ndarray, done: np.ndarray, pos: np.ndarray
    ) -> None:
        """Advance over steps ``(envs, rew, done)`` appended at slots ``pos`` in time order."""
        n = len(envs)
        j = np.arange(n)
        last_done = np.full(self.num_envs, -1, dtype=np.int64)
        np.maximum.at(last_done, envs[done], j[done])
        tail = j > last_done[envs]  # steps of the episode still running at the end
        tail_env = envs[tail]
        tail_rew = np.zeros_like(self.rew)
        np.add.at(tail_rew, tail_env, rew[tail])
        tail_len = np.bincount(tail_env, minlength=self.num_envs)
        first_tail = np.full(self.num_envs, n, dtype=np.int64)
        np.minimum.at(first_tail, tail_env, j[tail])
        tail_start = pos[np.minimum(first_tail, n - 1)]
        present = np.zeros(self.num_envs, dtype=bool)
        present[envs] = True
        restart = present & (last_done >= 0)  # an episode ended here: the tail is a new one
        fresh = present & ((self.len == 0) | restart) & (tail_len > 0)
        self.start = np.where(fresh, tail_start, self.start)
        self.rew[restart] = 0.0
        self.len[restart] = 0
        self.rew += tail_rew
        self.len += tail_len

    def arrays(self) -> dict[str, np.ndarray]:
        return {"ep_rew": self.rew, "ep_len": self.len, "ep_start": self.start}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.rew = np.asarray(arrays["ep_rew"], dtype=np.float64).copy()
        self.len = np.asarray(arrays["ep_len"], dtype=np.int64).copy()
        self.start = np.asarray(arrays["ep_start"], dtype=np.int64).copy()


class SharedRing:
    """One circular storage of ``size`` slots shared by ``num_envs`` envs, in insertion order,
    with stored episode links (core's default layout, registered as ``"replay"``)."""

    #: the registry name a buffer file records for this layout
    name = "replay"

    def __init__(self, size: int, num_envs: int = 1) -> None:
        if int(size) < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.maxsize = int(size)
        self.num_envs = int(num_envs)
        self.env_range = np.arange(self.num_envs, dtype=np.int64)
        self.stats = EpisodeStats(self.num_envs)
        self.size = 0  # valid slots
        self.index = 0  # next slot to write
        link = np.int32 if self.maxsize < 2**31 - 1 else np.int64
        self._prev = np.arange(self.maxsize, dtype=link)
        self._next = np.arange(self.maxsize + 1, dtype=link)  # last entry: spare sink
        env = np.int16 if self.num_envs <= 2**15 else np.int64
        self._env = np.zeros(self.maxsize, dtype=env)
        # per env: newest slot of the episode in progress (maxsize: no chain to continue)
        self._last = np.full(self.num_envs, self.maxsize, dtype=np.int64)
        self._term: np.ndarray | None = None
        self._trunc: np.ndarray | None = None

    def options(self) -> dict[str, Any]:
        """The layout's own options beyond ``size`` and ``num_envs`` (none)."""
        return {}

    def bind(self, terminated: np.ndarray, truncated: np.ndarray, rew: np.ndarray) -> None:
        """The buffer made (or reopened) its storage: the done flags and rewards arrays."""
        self._term, self._trunc = terminated, truncated
        self.stats.shape_returns(rew.shape[1:])

    # --- writing ----------------------------------------------------------------------------------

    def write(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one validated step of ``n`` envs (``writes``: storage array and value pairs;
        ``envs is self.env_range`` when it is every env in id order); return add()'s result."""
        maxsize = self.maxsize
        ptr, size = self.index, self.size
        if ptr + n <= maxsize:
            where: Any = slice(ptr, ptr + n)
            pos = np.arange(ptr, ptr + n, dtype=np.int64)
        else:
            pos = (ptr + self.env_range[:n]) % maxsize  # n <= num_envs: distinct
            where = pos
        for arr, value in writes:
            arr[where] = value
        if size + n > maxsize:
            self._unlink_overwritten(pos if size == maxsize else pos[pos < size])
        every = envs is self.env_range
        last = self._last.copy() if every else self._last[envs]
        self._next[last] = pos
        np.copyto(last, pos, where=last == maxsize)
        self._prev[where] = last
        self._next[where] = pos
        self._env[where] = envs
        if every:
            self._last[:] = pos
        else:
            self._last[envs] = pos
        done_mask = self._term[where] | self._trunc[where]  # type: ignore[index]
        any_done = np.count_nonzero(done_mask)
        if any_done:
            self._last[envs[done_mask]] = maxsize
        self.index = (ptr + n) % maxsize
        self.size = min(size + n, maxsize)
        return (pos.copy(), *self.stats.step(envs, pos, done_mask, any_done, rew, every))

    def _unlink_overwritten(self, old: np.ndarray) -> None:
        """Slots ``old`` (the oldest valid ones) are rewritten: their successors become first
        steps, and an env whose newest step is overwritten starts a fresh chain."""
        succ = self._next[old]
        moved = succ[succ != old]
        self._prev[moved] = moved
        old_env = self._env[old]
        hit = self._last[old_env] == old
        self._last[old_env[hit]] = self.maxsize

    def extend(
        self, columns: list[tuple[np.ndarray, np.ndarray]], envs: np.ndarray, rew: np.ndarray,
        done: np.ndarray,
    ) -> np.ndarray:
        """Append rows (``columns``: storage array and ``[T, ...]`` column pairs) of envs
        ``envs`` in time order, as if added one by one; return the slots that hold them."""
        total = len(envs)
        maxsize, ptr, size = self.maxsize, self.index, self.size
        pos_all = (ptr + np.arange(total, dtype=np.int64)) % maxsize
        self.stats.advance_rows(envs, rew, done, pos_all)
        keep = min(total, maxsize)
        if total > maxsize:  # everything already here is overwritten
            self._last[:] = maxsize
        pos = pos_all[total - keep :]
        envs, done = envs[total - keep :], done[total - keep :]
        for arr, col in columns:
            arr[pos] = col[total - keep :]
        if size + keep > maxsize and total <= maxsize:
            self._unlink_overwritten(pos if size == maxsize else pos[pos < size])
        # links: sort by env (stable keeps time order), then chain consecutive same-env steps
        order = np.argsort(envs, kind="stable")
        se, sp, sd = envs[order], pos[order], done[order]
        same = se[1:] == se[:-1]
        link = same & ~sd[:-1]
        prev_s, next_s = sp.copy(), sp.copy()
        prev_s[1:][link] = sp[:-1][link]
        next_s[:-1][link] = sp[1:][link]
        first = np.ones(keep, dtype=bool)
        first[1:] = ~same
        firsts = np.flatnonzero(first)
        before = self._last[se[firsts]]
        cont = before != maxsize
        prev_s[firsts[cont]] = before[cont]
        self._next[before] = sp[firsts]  # envs without a chain write into the spare slot
        self._prev[sp] = prev_s
        self._next[sp] = next_s
        self._env[pos] = envs
        lasts = np.flatnonzero(np.append(~same, True))
        self._last[se[lasts]] = np.where(sd[lasts], maxsize, sp[lasts])
        self.index = int((ptr + total) % maxsize)
        self.size = min(size + total, maxsize)
        return pos

    def reset(self, keep_statistics: bool = False) -> None:
        """Forget every transition (and, unless ``keep_statistics``, the episodes in progress;
        their next step starts a fresh link chain either way)."""
        self.index = 0
        self.size = 0
        slots = np.arange(self.maxsize)
        self._prev[:] = slots
        self._next[: self.maxsize] = slots
        self._env[:] = 0
        self._last[:] = self.maxsize
        if not keep_statistics:
            self.stats.clear()

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray:
        """End every unfinished episode (of the envs ``env_ids``; None: of every env) at its
        newest step (its ``truncated`` flag is set); return those slots."""
        idx = self.unfinished_index()
        if env_ids is not None and len(idx):
            idx = idx[np.isin(self._env[idx], np.asarray(env_ids))]
        if len(idx) and self._trunc is not None:
            self._trunc[idx] = True
            envs = self._env[idx]
            self._last[envs] = self.maxsize
            self.stats.clear(envs)
        return idx

    # --- reading ----------------------------------------------------------------------------------

    def prev(self, index: Any) -> np.ndarray:
        """Slot of the previous step of the same episode; the slot itself at its first step.
        Slots come back as int64 whatever the stored links' width, as from every layout."""
        return self._prev[index].astype(np.int64)

    def next(self, index: Any) -> np.ndarray:
        """Slot of the next step of the same episode; the slot itself at a done step or at the
        newest step of an unfinished episode."""
        return self._next[index].astype(np.int64)

    @property
    def env_id(self) -> np.ndarray:
        """``[maxsize]`` the env that wrote each slot."""
        return self._env

    def unfinished_index(self) -> np.ndarray:
        """The newest slot of every env's unfinished episode (in env id order)."""
        last = self._last
        return last[last != self.maxsize]

    def time_order(self) -> np.ndarray:
        """Every valid slot, oldest first."""
        if self.size < self.maxsize:
            return np.arange(self.size, dtype=np.int64)
        return np.roll(np.arange(self.maxsize, dtype=np.int64), -self.index)

    def valid_slots(self) -> Any:
        """The valid slots in storage order (a slice when contiguous)."""
        return slice(0, self.size)

    def uniform(self, rng: np.random.Generator, batch_size: int) -> np.ndarray:
        """``batch_size`` uniformly random valid slots (with replacement)."""
        return rng.integers(self.size, size=batch_size, dtype=np.int64)

    def steps_after(self, index: np.ndarray) -> np.ndarray:
        """``[B]`` how many later steps of the same episode are stored after each slot."""
        out = np.zeros(len(index), dtype=np.int64)
        cur = np.asarray(index, dtype=np.int64)
        rows = np.arange(len(cur))
        while len(rows):
            nxt = self._next[cur].astype(np.int64)
            moved = nxt != cur
            rows, cur = rows[moved], nxt[moved]
            out[rows] += 1
        return out

    def advance(self, index: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The slot ``steps`` later along ``next`` (at most to the episode's newest step)."""
        cur = np.asarray(index, dtype=np.int64).copy()
        left = np.asarray(steps, dtype=np.int64).copy()
        rows = np.flatnonzero(left > 0)
        while len(rows):
            cur[rows] = self._next[cur[rows]]
            left[rows] -= 1
            rows = rows[left[rows] > 0]
        return cur

    # --- files ------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """Scalar state (JSON-able) for buffer files."""
        return {"index": self.index, "size": self.size}

    def arrays(self) -> dict[str, np.ndarray]:
        """Bookkeeping arrays for buffer files (names are part of the file format)."""
        return {"prev": self._prev, "next": self._next, "env": self._env, "last": self._last,
                **self.stats.arrays()}

    def load(self, state: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state` and :meth:`arrays` gave (shapes are checked)."""
        index, size = int(state["index"]), int(state["size"])
        if not (0 <= size <= self.maxsize and 0 <= index < self.maxsize):
            raise ValueError(f"index {index} and size {size} do not fit a layout of "
                             f"{self.maxsize} slots")
        for name, mine in (("prev", self._prev), ("next", self._next), ("env", self._env),
                           ("last", self._last)):
            value = np.asarray(arrays[name])
            if value.shape != mine.shape:
                raise ValueError(f"{name} has shape {value.shape}, expected {mine.shape}")
            mine[...] = value
        self.stats.load_arrays(arrays)
        self.index, self.size = index, size
