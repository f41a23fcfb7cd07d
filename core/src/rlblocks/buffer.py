"""``ReplayBuffer``: the base circular buffer with explicit episode links.

One circular storage of ``maxsize`` slots holds the transitions of one or several envs, in the
order they were added. Each key is stored as one preallocated numpy array of shape
``[maxsize, *item_shape]`` (nested dicts, e.g. ``Dict`` observations, become nested storage), made
on the first :meth:`ReplayBuffer.add` from that batch's shapes and dtypes.

Because several envs' steps interleave in one storage, the episode structure is not "the slot
before/after" but kept in link arrays: every slot knows the previous and next slot of the same
env's episode (:meth:`ReplayBuffer.prev` / :meth:`ReplayBuffer.next`). A link ends at a slot itself:
``prev(i) == i`` at the first step of an episode or when the previous step has been overwritten,
``next(i) == i`` at a done step or at the newest step of an episode that has not ended. Frame
stacking, obs_next rebuilding, GAE and n-step returns all follow these links, so they never cross
an episode boundary or mix envs.

Reserved keys: ``obs, act, rew, terminated, truncated, obs_next, info, policy``; ``done`` is
derived (``terminated | truncated``). Any other key is stored too.

Hot paths (``add``, ``sample``, ``__getitem__``) work on the raw arrays; a :class:`Batch` is built
only for what is returned.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks._buffer_files import BufferFiles
from rlblocks._buffer_tree import (
    _RANK,
    RESERVED_KEYS,
    STACKED_KEYS,
    Path,
    Tree,
    _flatten,
    _name,
    _storage_dtype,
    _to_batch,
    _tree_leaves,
    _tree_map,
)
from rlblocks.batch import Batch

__all__ = ["RESERVED_KEYS", "STACKED_KEYS", "ReplayBuffer"]

class ReplayBuffer(BufferFiles):
    """Circular replay buffer for one or several envs, with episode links.

    Args:
        size: number of slots (``maxsize``); the oldest transitions are overwritten first.
        num_envs: how many envs may add to it (env ids ``0 .. num_envs - 1``).
        stack_num: frames to stack along axis 1 when reading obs/obs_next/info/policy (1 = none).
        ignore_obs_next: do not store ``obs_next``; it is rebuilt as ``obs[next(i)]`` when read.
        seed: seed of the buffer's own random generator (used by :meth:`sample_index`).
        storage: ``"memory"`` (numpy arrays in RAM) or ``"memmap"``: every stored key is a
            ``.npy`` file under ``path`` mapped into memory, so the buffer may exceed RAM (the OS
            pages it in and out); :meth:`flush` makes it durable, and a buffer built again with
            the same arguments and ``path`` continues from the last flush.
        path: directory of the memory-mapped files (``storage="memmap"`` only).

    ``len(buf)`` is the number of valid transitions. ``buf.obs``, ``buf.act``... expose the raw
    storage arrays (length ``maxsize``; nested keys as a Batch of them), ``buf.done`` the derived
    flag and ``buf.env_id`` the env of every slot.
    """

    #: Bookkeeping arrays (attribute ``_<name>``) that hdf5 files hold beside the data; a
    #: subclass with more state appends its own names.
    _META_ARRAYS: tuple[str, ...] = ("prev", "next", "env", "last", "ep_rew", "ep_len", "ep_start")

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        if storage not in ("memory", "memmap"):
            raise ValueError(f"storage must be 'memory' or 'memmap', got {storage!r}")
        if storage == "memmap" and path is None:
            raise ValueError("storage='memmap' needs path=<directory> for the array files")
        self.storage = storage
        self.path = None if path is None else os.path.abspath(os.fspath(path))
        if int(size) < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if int(stack_num) < 1:
            raise ValueError(f"stack_num must be >= 1, got {stack_num}")
        self.maxsize = int(size)
        self.num_envs = int(num_envs)
        self.stack_num = int(stack_num)
        self.ignore_obs_next = bool(ignore_obs_next)
        self._rng = np.random.default_rng(seed)
        self._data: Tree | None = None
        # (path, storage array, item shape) of every stored key, in storage order
        self._leaves: list[tuple[Path, np.ndarray, tuple[int, ...]]] = []
        self._env_range = np.arange(self.num_envs, dtype=np.int64)
        self._index = 0  # next slot to write
        self._size = 0
        self._init_links()
        # per env running episode statistics
        self._ep_rew = np.zeros(self.num_envs, dtype=np.float64)  # [num_envs, *rew_item_shape]
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)
        self._ep_start = np.zeros(self.num_envs, dtype=np.int64)
        self._fast: list[tuple[str, np.ndarray, tuple[int, ...]]] | None = None
        self._env_bytes = self._env_range.tobytes()
        self._env_varies = True  # False where a layout fixes each slot's env (vector buffer)
        if type(self).__init__ is ReplayBuffer.__init__:
            self._reopen_if_saved()

    def _init_links(self) -> None:
        """Allocate the episode bookkeeping (a layout that derives links overrides this)."""
        # per-slot bookkeeping in the narrowest integer type that fits (memory: 4 + 4 + 2 bytes
        # per slot instead of 24); prev()/next()/env_id return these dtypes
        link = np.int32 if self.maxsize < 2**31 - 1 else np.int64
        self._prev = np.arange(self.maxsize, dtype=link)  # [maxsize] slot links
        self._next = np.arange(self.maxsize + 1, dtype=link)  # last entry: spare sink
        env = np.int16 if self.num_envs <= 2**15 else np.int64
        self._env = np.zeros(self.maxsize, dtype=env)  # [maxsize] env id of each slot
        # per env: newest slot of the episode in progress (maxsize: no chain to continue)
        self._last = np.full(self.num_envs, self.maxsize, dtype=np.int64)

    # --- basic access -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: stored keys and the derived ``done``
        if name.startswith("_"):
            raise AttributeError(name)
        data = self.__dict__.get("_data")
        if data is not None:
            if name == "done":
                return data["terminated"] | data["truncated"]
            if name in data:
                node = data[name]
                return _to_batch(node) if isinstance(node, dict) else node
        raise AttributeError(
            f"{type(self).__name__} has no attribute or stored key {name!r}"
            + ("" if data is not None else " (nothing has been added yet)")
        )

    @property
    def _slots(self) -> np.ndarray:
        """``0 .. maxsize - 1`` (made when needed: keeping it would cost 8 bytes a slot)."""
        return np.arange(self.maxsize, dtype=np.int64)

    @property
    def env_id(self) -> np.ndarray:
        """``[maxsize]`` int64: the env that wrote each slot."""
        return self._env

    def keys(self) -> list[str]:
        """Stored top-level keys in storage order (``done`` is derived and not listed)."""
        return [] if self._data is None else list(self._data)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a stored top-level key (as listed by :meth:`keys`)."""
        return self._data is not None and key in self._data

    def seed(self, seed: int | None = None) -> None:
        """Reseed the generator that :meth:`sample_index` draws from."""
        self._rng = np.random.default_rng(seed)

    def _init_kwargs(self) -> dict[str, Any]:
        """Constructor arguments that rebuild an empty buffer like this one (saved in hdf5
        files; subclasses with more arguments extend it)."""
        return {
            "size": self.maxsize,
            "num_envs": self.num_envs,
            "stack_num": self.stack_num,
            "ignore_obs_next": self.ignore_obs_next,
        }

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._data is None or self._size == 0:
            return f"{name}()"
        valid = self._valid_slots()
        text = repr(self._batch_of(valid, stack_num=1, storage_order=True))
        return name + text[len("Batch") :]

    # --- storage ------------------------------------------------------------------------------

    def _allocate(self, leaves: dict[Path, Any], single: bool, n: int) -> None:
        """Create the storage arrays from the first batch's shapes and dtypes."""
        order = sorted(leaves, key=lambda p: _RANK.get(p[0], len(_RANK)))
        tree: Tree = {}
        flat: list[tuple[Path, np.ndarray, tuple[int, ...]]] = []
        for path in order:
            value = np.asarray(leaves[path])
            if single:
                item = value.shape
            else:
                if value.ndim == 0 or value.shape[0] != n:
                    raise ValueError(
                        f"key {_name(path)!r} has shape {value.shape}, but rew says this is one "
                        f"step of {n} envs: every value needs a leading axis of length {n}"
                    )
                item = value.shape[1:]
            arr = self._new_array(path, (self.maxsize, *item), _storage_dtype(path, value))
            node = tree
            for key in path[:-1]:
                node = node.setdefault(key, {})
                if not isinstance(node, dict):
                    raise ValueError(f"key {_name(path)!r} is both a leaf and a nested dict")
            node[path[-1]] = arr
            flat.append((path, arr, tuple(item)))
        self._set_storage(tree)
        rew_item = tree["rew"].shape[1:]
        if rew_item != self._ep_rew.shape[1:]:
            self._ep_rew = np.zeros((self.num_envs, *rew_item), dtype=np.float64)

    def _set_storage(self, tree: Tree) -> None:
        self._data = tree
        self._leaves = [(p, a, a.shape[1:]) for p, a in _tree_leaves(tree)]
        self._term = tree["terminated"]  # [maxsize] bool, shortcuts for add()
        self._trunc = tree["truncated"]
        # add()'s fast path: (key, storage, shape of one step of every env) for flat storage
        flat = all(len(p) == 1 for p, _, _ in self._leaves)
        self._fast = (
            [(p[0], a, (self.num_envs, *item)) for p, a, item in self._leaves] if flat else None
        )
        if self._fast is not None:  # the same, as one getter and two lists
            self._fast_get = operator.itemgetter(*(k for k, _, _ in self._fast))
            self._fast_arrays = [a for _, a, _ in self._fast]
            self._fast_shapes = [shape for _, _, shape in self._fast]
        # where terminated / truncated sit in the writes of an add (they are top-level keys)
        paths = [p for p, _, _ in self._leaves]
        self._flag_at = (paths.index(("terminated",)), paths.index(("truncated",)))

    def _key_error(self, given: set[Path], what: str) -> ValueError:
        stored = {p for p, _, _ in self._leaves}
        missing = sorted(_name(p) for p in stored - given)
        extra = sorted(_name(p) for p in given - stored)
        parts = []
        if missing:
            parts.append(f"missing key(s) {missing}")
        if extra:
            parts.append(f"unknown key(s) {extra}")
        return ValueError(
            f"{what} does not match the buffer's storage: {'; '.join(parts)}. The keys are fixed "
            f"by the first add ({sorted(_name(p) for p in stored)}); call reset() keeps them too, "
            "so make a new buffer to store other keys"
        )

    # --- adding -------------------------------------------------------------------------------

    def _check_env_ids(self, env_ids: Any, n: int) -> np.ndarray:
        """``[n]`` int64 env ids: ``0..n-1`` by default, else validated (in range, distinct)."""
        if n > self.maxsize:
            raise ValueError(
                f"cannot add {n} transitions at once to a buffer of size {self.maxsize}"
            )
        if env_ids is None:
            if n > self.num_envs:
                raise ValueError(
                    f"a step of {n} envs was added to a buffer made for num_envs={self.num_envs}; "
                    "pass env_ids or make the buffer with a larger num_envs"
                )
            return self._env_range[:n]
        envs = np.asarray(env_ids, dtype=np.int64)
        if envs.shape != (n,):
            envs = envs.reshape(-1)
            if envs.shape[0] != n:
                raise ValueError(f"env_ids has {envs.shape[0]} entries for a step of {n} envs")
        try:  # one pass finds negative, too large and repeated ids
            counts = np.bincount(envs, minlength=self.num_envs)
            bad = len(counts) > self.num_envs or np.count_nonzero(counts) != n
        except ValueError:  # negative ids
            bad = True
        if bad:
            raise ValueError(
                f"env_ids {envs.tolist()} must be distinct and in [0, {self.num_envs}) "
                f"(num_envs={self.num_envs})"
            )
        return envs

    def add(
        self, batch: Batch | Mapping[str, Any], env_ids: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Add one step of one env (``rew`` is 0-d) or of ``N`` envs (``rew`` has shape ``[N]``).

        ``batch`` holds ``obs, act, rew, terminated, truncated`` (or ``done`` in place of the two
        flags; truncated is then False), usually ``obs_next``, and optionally ``info``, ``policy``
        and any other key; every value has a leading axis ``N`` unless it is a single step.
        ``env_ids`` (``[N]``, distinct) says which env each row belongs to; it defaults to
        ``0 .. N-1``.

        Returns ``(index, ep_rew, ep_len, ep_start)``, each of shape ``[N]``: the slots written;
        for envs whose episode ended at this step its return and length (else 0 and 0); and the
        slot where each env's current (or just finished) episode started.

        Keys, per-step shapes and dtypes are fixed by the first add (later values are cast to the
        stored dtype by numpy assignment). A reward with several components needs the env axis
        even for one env (``rew`` of shape ``[N, K]``; ``ep_rew`` is then ``[N, K]``). This is a
        hot path: no Python loop over rows; a failed add raises before anything is written.
        """
        writes = self._fast_writes(batch, env_ids)
        if writes is not None:  # the common case, checked in a few hundred nanoseconds
            return self._write_step(self._env_range, self.num_envs, writes, batch["rew"])
        leaves: dict[Path, Any] = {}
        _flatten(batch, (), leaves)
        done = leaves.pop(("done",), None)
        term = leaves.get(("terminated",))
        if term is None:
            if done is None:
                raise KeyError("add() needs 'terminated' and 'truncated' (or 'done') in the batch")
            leaves[("terminated",)] = done
        rew = leaves.get(("rew",))
        if rew is None:
            raise KeyError("add() needs 'rew' in the batch")
        rew = np.asarray(rew)
        single = rew.ndim == 0
        n = 1 if single else rew.shape[0]
        if ("truncated",) not in leaves:
            leaves[("truncated",)] = False if single else np.zeros(n, dtype=bool)
        if self.ignore_obs_next:
            for path in [p for p in leaves if p[0] == "obs_next"]:
                del leaves[path]
        envs = self._check_env_ids(env_ids, n)
        if n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return empty, np.zeros((0, *self._ep_rew.shape[1:])), empty.copy(), empty.copy()

        if self._data is None:
            self._allocate(leaves, single, n)

        # check every key and shape before writing anything
        if len(leaves) != len(self._leaves):
            raise self._key_error(set(leaves), "the added batch")
        writes = []
        for path, arr, item in self._leaves:
            value = leaves.get(path, leaves)  # `leaves` itself marks "missing"
            if value is leaves:
                raise self._key_error(set(leaves), "the added batch")
            shape = value.shape if type(value) is np.ndarray else np.shape(value)
            if single:
                if shape != item:
                    raise ValueError(
                        f"key {_name(path)!r} has shape {tuple(shape)}, the buffer stores "
                        f"{item} per step"
                    )
            elif shape[:1] != (n,) or shape[1:] != item:
                raise ValueError(
                    f"key {_name(path)!r} has shape {tuple(shape)} for a step of {n} envs, "
                    f"expected {(n, *item)}"
                )
            writes.append((arr, value))
        return self._write_step(envs, n, writes, rew)

    def _fast_writes(self, batch: Any, env_ids: Any) -> list[tuple[np.ndarray, Any]] | None:
        """``(storage, value)`` pairs when ``batch`` is the common case, else None: a plain dict
        of arrays with exactly the stored top-level keys, one step of every env in env id order
        (``env_ids`` None or ``arange(num_envs)`` as int64)."""
        fast = self._fast
        if fast is None or type(batch) is not dict or len(batch) != len(fast):
            return None
        if env_ids is not None and (
            type(env_ids) is not np.ndarray
            or env_ids.dtype != np.int64
            or env_ids.tobytes() != self._env_bytes
        ):
            return None
        try:  # anything with the right shapes is written by numpy assignment (as add() would)
            values = self._fast_get(batch)
            if [v.shape for v in values] != self._fast_shapes:
                return None
        except (KeyError, AttributeError):
            return None
        return list(zip(self._fast_arrays, values))

    def _write_step(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one validated step of ``n`` envs and advance links and episode statistics."""
        maxsize = self.maxsize
        where, pos, overwritten = self._claim_slots(envs, n)
        for arr, value in writes:
            arr[where] = value

        if overwritten is not None:
            self._unlink_overwritten(overwritten)

        # episode links; envs without a chain have _last == maxsize, a spare slot of _next
        every = envs is self._env_range  # all envs in id order: whole-array ops, no gathers
        last = self._last.copy() if every else self._last[envs]
        self._next[last] = pos
        np.copyto(last, pos, where=last == maxsize)
        self._prev[where] = last
        self._next[where] = pos
        if self._env_varies:
            self._env[where] = envs
        if every:
            self._last[:] = pos
        else:
            self._last[envs] = pos
        # read the flags back from storage: bool arrays whatever the caller passed
        done_mask = self._term[where] | self._trunc[where]
        any_done = np.count_nonzero(done_mask)
        if any_done:
            self._last[envs[done_mask]] = maxsize

        self._commit_slots(envs, n)
        return (pos.copy(), *self._episode_stats(envs, pos, done_mask, any_done, rew, every))

    def _episode_stats(
        self, envs: np.ndarray, pos: np.ndarray, done_mask: np.ndarray, any_done: int,
        rew: Any, every: bool,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance the running episode statistics of ``envs`` by one step written at ``pos``;
        return add()'s ``(ep_rew, ep_len, ep_start)`` (``every``: envs is all envs in order)."""
        n = len(pos)
        if every and not any_done:  # running statistics in place; nothing to report
            ep_len = self._ep_len
            start = self._ep_start
            np.copyto(start, pos, where=ep_len == 0)
            ep_len += 1
            self._ep_rew += rew
            zeros = np.zeros(n, dtype=np.int64)
            return np.zeros(self._ep_rew.shape), zeros, start.copy()

        ep_len = self._ep_len[envs]
        start = self._ep_start[envs]
        np.copyto(start, pos, where=ep_len == 0)
        self._ep_start[envs] = start
        ep_len += 1
        self._ep_len[envs] = ep_len
        ep_rew = self._ep_rew[envs]
        ep_rew += rew
        self._ep_rew[envs] = ep_rew
        if any_done:
            ended = envs[done_mask]
            self._ep_rew[ended] = 0.0
            self._ep_len[ended] = 0
            ep_len *= done_mask
            ep_rew[~done_mask] = 0.0
        else:
            ep_len = np.zeros(n, dtype=np.int64)
            ep_rew = np.zeros(ep_rew.shape)
        return ep_rew, ep_len, start

    # --- slot allocation (what a vector or cached layout overrides) -----------------------------

    def _claim_slots(self, envs: np.ndarray, n: int) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """Where the ``n`` rows of one add go, without changing any state yet.

        Returns ``(where, pos, overwritten)``: an index usable for storage writes (a slice when
        possible, it is faster), the ``[n]`` slots, and the slots among them that held valid
        transitions (None when nothing valid is overwritten). :meth:`_commit_slots` then moves
        the write position once the add has succeeded."""
        ptr, size, maxsize = self._index, self._size, self.maxsize
        if ptr + n <= maxsize:
            where: Any = slice(ptr, ptr + n)
            pos = np.arange(ptr, ptr + n, dtype=np.int64)
        else:
            pos = (ptr + self._env_range[:n]) % maxsize  # n <= num_envs: env ids are distinct
            where = pos
        if size + n <= maxsize:
            return where, pos, None
        return where, pos, (pos if size == maxsize else pos[pos < size])

    def _commit_slots(self, envs: np.ndarray, n: int) -> None:
        """Advance the write position after ``n`` rows were written at :meth:`_claim_slots`."""
        self._index = (self._index + n) % self.maxsize
        self._size = min(self._size + n, self.maxsize)

    def _valid_slots(self) -> Any:
        """The valid slots in storage order (a slice when they are contiguous)."""
        return slice(0, self._size)

    def _unlink_overwritten(self, old: np.ndarray) -> None:
        """Slots ``old`` (the oldest valid ones) are about to be rewritten: their successors
        become first steps, and an env whose newest step is overwritten starts a fresh chain."""
        succ = self._next[old]
        moved = succ[succ != old]
        self._prev[moved] = moved
        old_env = self._env[old]
        hit = self._last[old_env] == old
        self._last[old_env[hit]] = self.maxsize

    # --- reading ------------------------------------------------------------------------------

    def _time_order(self) -> np.ndarray:
        if self._size < self.maxsize:
            return np.arange(self._size, dtype=np.int64)
        return np.roll(self._slots, -self._index)

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """The same as :meth:`sample_index` (the name ARCHITECTURE.md uses); subclasses override
        ``sample_index`` only."""
        return self.sample_index(batch_size)

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0``: that many uniformly random valid slots (with replacement);
        ``0``: every valid slot in time (insertion) order; ``< 0``: an empty array."""
        if batch_size > 0:
            if self._size == 0:
                raise ValueError("cannot sample from an empty buffer; add transitions first")
            return self._rng.integers(self._size, size=batch_size, dtype=np.int64)
        if batch_size == 0:
            return self._time_order()
        return np.zeros(0, dtype=np.int64)

    def sample(self, batch_size: int) -> tuple[Batch, np.ndarray]:
        """``(self[indices], indices)`` with ``indices = self.sample_index(batch_size)``."""
        indices = self.sample_index(batch_size)
        return self[indices], indices

    def prev(self, index: Any) -> np.ndarray:
        """Slot of the previous step of the same episode; the slot itself at an episode's first
        (stored) step."""
        return self._prev[index]

    def next(self, index: Any) -> np.ndarray:
        """Slot of the next step of the same episode; the slot itself at a done step or at the
        newest step of an episode that has not ended."""
        return self._next[index]

    def unfinished_index(self) -> np.ndarray:
        """The newest slot of every env's episode that has not ended (in env id order)."""
        last = self._last
        return last[last != self.maxsize]

    def _resolve(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._time_order()[index]
        if isinstance(index, int | np.integer):
            return int(index)
        return np.asarray(index)

    def _stack_index(self, index: Any, stack_num: int) -> Any:
        """``[..., stack_num]`` slots: ``stack_num - 1`` steps back along ``prev`` up to
        ``index`` (the first step of an episode repeats)."""
        idx = np.asarray(index)
        frames = np.empty((*idx.shape, stack_num), dtype=np.int64)
        frames[..., -1] = idx
        cur = idx
        for k in range(stack_num - 2, -1, -1):
            cur = self.prev(cur)
            frames[..., k] = cur
        return frames

    def _gather(self, node: Any, index: Any, stack_num: int) -> Any:
        if stack_num > 1:
            index = self._stack_index(index, stack_num)
        if type(index) is np.ndarray:  # take() is several times faster than fancy indexing
            if isinstance(node, dict):
                return _tree_map(node, lambda a: a.take(index, axis=0))
            return node.take(index, axis=0)
        if isinstance(node, dict):
            return _tree_map(node, lambda a: a[index])
        return node[index]

    def _batch_of(self, index: Any, stack_num: int, storage_order: bool = False) -> Batch:
        """Batch of all keys at resolved ``index`` (the ``storage_order`` flag only skips
        obs_next rebuilding, for the repr)."""
        assert self._data is not None
        out: dict[str, Any] = {}
        for key, node in self._data.items():
            out[key] = self._gather(node, index, stack_num if key in STACKED_KEYS else 1)
            if key == "truncated":
                out["done"] = out["terminated"] | out["truncated"]
        if self.ignore_obs_next and not storage_order:
            nxt = self.next(index)
            out["obs_next"] = self._gather(self._data["obs"], nxt, stack_num)
            # keep the reserved key order: obs_next before info/policy/extras
            out = dict(
                sorted(out.items(), key=lambda kv: _RANK.get(kv[0], 4.5 if kv[0] == "done" else 99))
            )
        return _to_batch(out)

    def __getitem__(self, index: Any) -> Batch:
        """Transitions at ``index`` (int / index array: slots; slice: positions in time order, so
        ``buf[:]`` is ``buf[buf.sample_index(0)]``), with every stored key plus ``done``;
        obs/obs_next/info/policy stacked along axis 1 when ``stack_num > 1``, and ``obs_next``
        rebuilt as ``obs[next(i)]`` when it is not stored."""
        if self._data is None:
            raise IndexError(f"{type(self).__name__} is empty: nothing has been added yet")
        return self._batch_of(self._resolve(index), self.stack_num)

    def get(
        self, index: Any, key: str, default: Any = None, stack_num: int | None = None
    ) -> Any:
        """Value of ``key`` at ``index`` (as in ``__getitem__``); ``default`` if not stored.

        obs/obs_next/info/policy are stacked along axis 1 by following ``prev`` (``stack_num``
        defaults to the buffer's); ``obs_next`` is rebuilt when not stored; ``done`` is derived.
        Nested keys come back as a Batch.
        """
        stack = self.stack_num if stack_num is None else int(stack_num)
        if stack < 1:
            raise ValueError(f"stack_num must be >= 1, got {stack_num}")
        data = self._data
        if data is None:
            return default
        idx = self._resolve(index)
        if key == "done":
            return data["terminated"][idx] | data["truncated"][idx]
        if key == "obs_next" and self.ignore_obs_next:
            key, idx = "obs", self.next(idx)
        node = data.get(key)
        if node is None:
            return default
        value = self._gather(node, idx, stack if key in STACKED_KEYS else 1)
        return _to_batch(value) if isinstance(value, dict) else value

    # --- bulk operations ------------------------------------------------------------------------

    def _raw_columns(self, index: np.ndarray, with_obs_next: bool) -> dict[Path, np.ndarray]:
        """Unstacked values of every stored key at ``index``; obs_next rebuilt from ``next``
        when asked for and not stored."""
        cols = {p: arr[index] for p, arr, _ in self._leaves}
        if with_obs_next and self.ignore_obs_next:
            nxt = self.next(index)
            for p, arr, _ in self._leaves:
                if p[0] == "obs":
                    cols[("obs_next", *p[1:])] = arr[nxt]
        if not with_obs_next:
            cols = {p: v for p, v in cols.items() if p[0] != "obs_next"}
        return cols

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Append ``other``'s valid transitions in its ``sample_index(0)`` order (time order;
        env by env when ``other`` is a vector buffer); return the slots written.

        Links are rebuilt from env ids and done flags as if the transitions had been added one
        by one: a transition continues the newest step of the same env unless that step was done
        (so an unfinished episode in ``self`` continues into ``other``'s first steps of that env).
        Running episode statistics advance the same way. Keys must match; ``obs_next`` is rebuilt
        from ``other`` when ``self`` stores it and ``other`` does not. When ``other`` holds more
        than ``maxsize`` transitions, only the last ``maxsize`` of that order remain.
        """
        rows = self._rows_of(other)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        cols, envs = rows
        return self._append(cols, envs, "the other buffer")

    def _rows_of(self, other: ReplayBuffer) -> tuple[dict[Path, np.ndarray], np.ndarray] | None:
        """``other``'s valid transitions for :meth:`update`: ``(columns, env ids)`` in its
        ``sample_index(0)`` order, or None when it holds none. Refuses itself, objects that are
        not buffers and env ids this buffer was not made for."""
        if other is self:
            raise ValueError("a buffer cannot update from itself")
        if not isinstance(other, ReplayBuffer):
            raise TypeError(f"update() takes a ReplayBuffer, got {type(other).__name__}")
        oidx = other.sample_index(0)
        if len(oidx) == 0 or other._data is None:
            return None
        cols = other._raw_columns(oidx, with_obs_next=not self.ignore_obs_next)
        envs = np.asarray(other.env_id)[oidx].astype(np.int64, copy=False)
        if envs.max() >= self.num_envs:
            raise ValueError(
                f"other holds env ids up to {int(envs.max())}, but this buffer was made for "
                f"num_envs={self.num_envs}"
            )
        return cols, envs

    def _append(self, cols: dict[Path, np.ndarray], envs: np.ndarray, what: str) -> np.ndarray:
        """Append rows ``cols`` (``{path: [T, ...] column}``, every stored key) of envs ``envs``
        in time order, as if added one by one; return the slots written (see :meth:`update`)."""
        total = len(envs)
        if self._data is None:
            self._allocate(cols, single=False, n=total)
        if set(cols) != {p for p, _, _ in self._leaves}:
            raise self._key_error(set(cols), what)
        rew = cols[("rew",)]
        done = cols[("terminated",)] | cols[("truncated",)]
        maxsize, ptr, size = self.maxsize, self._index, self._size
        pos_all = (ptr + np.arange(total, dtype=np.int64)) % maxsize  # as if added one by one

        self._advance_episode_stats(envs, rew, done, pos_all)

        keep = min(total, maxsize)
        if total > maxsize:  # everything already here is overwritten
            self._last[:] = maxsize
        pos = pos_all[total - keep :]
        envs, done = envs[total - keep :], done[total - keep :]
        for p, arr, _ in self._leaves:
            arr[pos] = cols[p][total - keep :]
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

        self._index = int((ptr + total) % maxsize)
        self._size = min(size + total, maxsize)
        return pos

    def _advance_episode_stats(
        self, envs: np.ndarray, rew: np.ndarray, done: np.ndarray, pos: np.ndarray
    ) -> None:
        """Running return/length/start per env after appending steps ``(envs, rew, done)`` at
        slots ``pos`` in time order, exactly as one-by-one adds would leave them."""
        n = len(envs)
        j = np.arange(n)
        last_done = np.full(self.num_envs, -1, dtype=np.int64)
        np.maximum.at(last_done, envs[done], j[done])
        tail = j > last_done[envs]  # steps of the episode still running at the end
        tail_env = envs[tail]
        tail_rew = np.zeros_like(self._ep_rew)
        np.add.at(tail_rew, tail_env, rew[tail])
        tail_len = np.bincount(tail_env, minlength=self.num_envs)
        first_tail = np.full(self.num_envs, n, dtype=np.int64)
        np.minimum.at(first_tail, tail_env, j[tail])
        tail_start = pos[np.minimum(first_tail, n - 1)]

        present = np.zeros(self.num_envs, dtype=bool)
        present[envs] = True
        restart = present & (last_done >= 0)  # an episode ended here: the tail is a new one
        fresh = present & ((self._ep_len == 0) | restart) & (tail_len > 0)
        self._ep_start = np.where(fresh, tail_start, self._ep_start)
        self._ep_rew[restart] = 0.0
        self._ep_len[restart] = 0
        self._ep_rew += tail_rew
        self._ep_len += tail_len

    def reset(self, keep_statistics: bool = False) -> None:
        """Forget all transitions (the storage arrays and their keys stay allocated).

        With ``keep_statistics`` the running return/length of episodes in progress survive, so
        an on-policy loop that clears the buffer between updates still reports whole episodes;
        their next step starts a fresh link chain either way."""
        self._index = 0
        self._size = 0
        self._reset_links()
        if not keep_statistics:
            self._ep_rew[:] = 0.0
            self._ep_len[:] = 0
            self._ep_start[:] = 0

    def _reset_links(self) -> None:
        """Forget every episode link (all slots invalid)."""
        self._prev[:] = self._slots
        self._next[: self.maxsize] = self._slots
        self._env[:] = 0
        self._last[:] = self.maxsize

    def truncate_unfinished(self) -> np.ndarray:
        """Mark the newest step of every unfinished episode as truncated and end it there (e.g.
        after loading a buffer whose envs restart); return those slots."""
        idx = self.unfinished_index()
        if len(idx) and self._data is not None:
            self._data["truncated"][idx] = True
            envs = self._env[idx]
            self._last[envs] = self.maxsize
            self._ep_rew[envs] = 0.0
            self._ep_len[envs] = 0
        return idx
