"""``ReplayBuffer``: a replay buffer composed of storage x layout x sampler (+ relabeller, writer).

Each stored key is one preallocated array of shape ``[maxsize, *item_shape]`` (nested dicts, e.g.
``Dict`` or ``Tuple`` observations, become nested storage), made on the first :meth:`add` from that
batch's shapes and dtypes, in RAM (``storage="memory"``) or as memory-mapped ``.npy`` files
(``storage="memmap"``). The other parts are objects (see :mod:`rlblocks.replay`):

* the **layout** decides which slot each env's step goes to and keeps the episode structure:
  every slot knows the previous and next slot of the same env's episode (:meth:`prev` /
  :meth:`next`); ``prev(i) == i`` at the first stored step of an episode, ``next(i) == i`` at a
  done step or at the newest step of an episode that has not ended. Frame stacking, obs_next
  rebuilding, GAE and n-step returns follow these links, so they never cross an episode boundary
  or mix envs. Default: :class:`~rlblocks.replay.SharedRing` (envs interleave in one ring);
* the **sampler** draws what :meth:`sample` returns (default uniform);
* an optional **relabeller** rewrites sampled rows (hindsight goals);
* an optional **writer** decides what an :meth:`add` admits (whole episodes only, ...).

Reserved keys: ``obs, act, rew, terminated, truncated, obs_next, info, policy``; ``done`` is
derived (``terminated | truncated``). Any other key is stored too. Hot paths (``add``,
``sample``, ``__getitem__``) work on the raw arrays; a :class:`Batch` is built only for what is
returned.
"""

from __future__ import annotations

import inspect
import operator
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlblocks.contracts import (
    Batch,
    BufferAbilities,
    BufferFileError,
    ConfigError,
    writable_dir_problem,
)
from rlblocks.replay._files import BufferFiles
from rlblocks.replay._layouts import SharedRing
from rlblocks.replay._parts import (
    AnnealedSampler,
    EnvAttachedPart,
    Layout,
    PrioritySampler,
    Relabeller,
    Sampler,
    SequenceSampler,
    UniformSampler,
    Writer,
    build_part,
)
from rlblocks.replay._tree import (
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

__all__ = ["RESERVED_KEYS", "STACKED_KEYS", "ReplayBuffer", "add_in_runs"]


_INT64 = np.dtype(np.int64)


def _plain_view(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself, or a plain ndarray view of it when it is a subclass (a memmap)."""
    return arr if type(arr) is np.ndarray else arr.view(np.ndarray)


class _OneGetter:
    """Like ``operator.itemgetter(key)``, but returning a 1-tuple as it does for several keys.
    A class, not a closure, so a buffer holding it pickles."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, d: Mapping[str, Any]) -> tuple[Any]:
        return (d[self.key],)


class ReplayBuffer(BufferFiles):
    """Replay buffer for one or several envs, with episode links, made of parts.

    Args:
        size: number of slots (``maxsize``; a layout may round it, the per-env one to whole
            sub-buffers); the oldest transitions are overwritten first.
        num_envs: how many envs may add to it (env ids ``0 .. num_envs - 1``).
        stack_num: frames to stack along axis 1 when reading obs/obs_next/info/policy (1 = none).
        ignore_obs_next: do not store ``obs_next``; it is rebuilt as ``obs[next(i)]`` when read.
        seed: seed of the buffer's random generator (:attr:`rng`, shared by its parts).
        storage: ``"memory"`` (numpy arrays in RAM) or ``"memmap"``: every stored key is a
            ``.npy`` file under ``path`` mapped into memory, so the buffer may exceed RAM (the OS
            pages it in and out); :meth:`flush` makes it durable, and a buffer built again with
            the same arguments and ``path`` continues from the last flush.
        path: directory of the memory-mapped files (``storage="memmap"`` only).
        layout: a :class:`~rlblocks.replay.Layout` instance or class (built as
            ``cls(size, num_envs)``); default the class's :attr:`default_layout`.
        sampler: a :class:`~rlblocks.replay.Sampler`; default uniform.
        relabel: a :class:`~rlblocks.replay.Relabeller`, or None.
        writer: a :class:`~rlblocks.replay.Writer`, or None (every step written as it comes).

    ``len(buf)`` is the number of valid transitions. ``buf.obs``, ``buf.act``... expose the raw
    storage arrays (length ``maxsize``; nested keys as a Batch of them), ``buf.done`` the derived
    flag and ``buf.env_id`` the env of every slot. Build one by name with
    :func:`rlblocks.make_buffer`.
    """

    #: The layout class built when none is given; a preset subclass names another
    #: (``VectorReplayBuffer``: the per-env layout).
    default_layout: type = SharedRing

    def __init__(
        self,
        size: int,
        num_envs: int = 1,
        stack_num: int = 1,
        ignore_obs_next: bool = False,
        seed: int | None = None,
        storage: str = "memory",
        path: str | os.PathLike[str] | None = None,
        *,
        layout: Layout | type | None = None,
        sampler: Sampler | None = None,
        relabel: Relabeller | None = None,
        writer: Writer | None = None,
    ) -> None:
        if storage not in ("memory", "memmap"):
            raise ValueError(f"storage must be 'memory' or 'memmap', got {storage!r}")
        if storage == "memmap" and path is None:
            raise ValueError("storage='memmap' needs path=<directory> for the array files")
        self.storage = storage
        self.path = None if path is None else os.path.abspath(os.fspath(path))
        if storage == "memmap":
            problem = writable_dir_problem(os.fspath(path))  # type: ignore[arg-type]
            if problem is not None:
                raise ConfigError(f"the memory-mapped buffer's path (buffer.path): {problem}")
        if int(size) < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if int(stack_num) < 1:
            raise ValueError(f"stack_num must be >= 1, got {stack_num}")
        if layout is None:
            layout = self.default_layout
        if isinstance(layout, type):
            layout = layout(int(size), int(num_envs))
        if not isinstance(layout, Layout):
            raise TypeError(f"layout must be a rlblocks.replay.Layout, got {type(layout).__name__}")
        if layout.num_envs != int(num_envs):
            raise ValueError(f"the layout was made for {layout.num_envs} envs, not {num_envs}")
        self.layout: Layout = layout
        self.size_requested = int(size)
        self.maxsize = int(layout.maxsize)
        self.num_envs = int(num_envs)
        self.stack_num = int(stack_num)
        self.ignore_obs_next = bool(ignore_obs_next)
        self.rng = np.random.default_rng(seed)
        self._data: Tree | None = None
        # the same tree with plain ndarray views of memory-mapped arrays (what reads use)
        self._plain: Tree = {}
        # (path, storage array, item shape) of every stored key, in storage order
        self._leaves: list[tuple[Path, np.ndarray, tuple[int, ...]]] = []
        # what writes go to, aligned with _leaves: the arrays, or plain views of memmaps
        self._sinks: list[np.ndarray] = []
        self._env_range = layout.env_range
        self._env_bytes = self._env_range.tobytes()
        # add()'s fast path (see _set_storage); -1: not set up, no batch has this many keys
        self._fast_len = -1
        self._rew_item: tuple[int, ...] = ()
        self.sampler: Sampler = UniformSampler() if sampler is None else sampler
        self.relabeller: Relabeller | None = relabel
        self.writer: Writer | None = writer
        for kind, part, proto in (
            ("sampler", self.sampler, Sampler),
            ("relabel", relabel, Relabeller),
            ("writer", writer, Writer),
        ):
            if part is not None and not isinstance(part, proto):
                raise TypeError(
                    f"{kind} must be a rlblocks.replay.{proto.__name__}, got {type(part).__name__}"
                )
        # a uniform sampler needs no notice of writes and adds no columns to reads
        self._watch = not isinstance(self.sampler, UniformSampler)
        if self.relabeller is not None and self.stack_num != 1:
            raise ValueError(
                f"the {self.relabeller.name!r} relabeller reads single observations (stack_num=1), "
                f"got stack_num={stack_num}; stack frames inside the observation instead"
            )
        self.sampler.bind(self)
        if self.relabeller is not None:
            self.relabeller.bind(self)
        if self.writer is not None:
            self.writer.bind(self)
        self._reopen_if_saved()

    # --- parts and abilities ------------------------------------------------------------------

    def parts(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """``{kind: (registry name, options)}`` of the layout, sampler, relabeller and writer
        (what buffer files record to rebuild the buffer by name)."""
        out: dict[str, tuple[str, dict[str, Any]]] = {
            "layout": (self.layout.name, self.layout.options()),
            "sampler": (self.sampler.name, self.sampler.options()),
        }
        if self.relabeller is not None:
            out["relabel"] = (self.relabeller.name, self.relabeller.options())
        if self.writer is not None:
            out["writer"] = (self.writer.name, self.writer.options())
        return out

    def abilities(self) -> BufferAbilities:
        """Which optional abilities this buffer's parts give it (checked once per run)."""
        parts = [p for p in (self.sampler, self.relabeller, self.writer) if p is not None]
        return BufferAbilities(
            prioritized=isinstance(self.sampler, PrioritySampler),
            annealed=isinstance(self.sampler, AnnealedSampler),
            relabelling=self.relabeller is not None,
            seedable=True,
            env_attached=any(isinstance(p, EnvAttachedPart) for p in parts),
            episode_cut=True,
            persistent=True,
            sequences=isinstance(self.sampler, SequenceSampler),
            # a subclass may end every env's episodes only (no env_ids): asked, not assumed
            cuts_some_envs="env_ids" in inspect.signature(self.truncate_unfinished).parameters,
            stack_num=self.stack_num,
            rebuilds_obs_next=self.ignore_obs_next,
        )

    def update_priority(self, index: Any, td_error: Any) -> None:
        """Give sampled slots new priorities (``|td_error|``-based); needs a priority sampler."""
        sampler = self.sampler
        if not isinstance(sampler, PrioritySampler):
            raise TypeError(
                f"this buffer samples with {sampler.name!r}, which keeps no priorities; build it "
                "with sampler='prioritized' to use update_priority"
            )
        sampler.update_priority(index, td_error)

    def set_env_step(self, env_step: int) -> None:
        """Tell the sampler the training progress (anneals prioritized replay's beta)."""
        if isinstance(self.sampler, AnnealedSampler):
            self.sampler.set_env_step(env_step)

    def attach_env(self, env: Any) -> ReplayBuffer:
        """Give the parts that need them the env's own functions (a goal env's
        ``compute_reward`` for hindsight relabelling); returns the buffer."""
        for part in (self.sampler, self.relabeller, self.writer):
            if isinstance(part, EnvAttachedPart):
                part.attach_env(env)
        return self

    def batch_view(self, batch: Batch, indices: np.ndarray) -> Any:
        """The buffer as the rows of a sampled batch see it: the relabeller's view (reads along
        each row's episode see its rewritten goal), or the buffer itself."""
        if self.relabeller is None:
            return self
        return self.relabeller.view(batch, indices)

    # --- basic access -------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.layout.size

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
        hint = "" if data is not None else " (nothing has been added yet)"
        if name == "info" and data is not None:
            # an empty info dict stores nothing; a collector stores only the keys it is told
            hint = (
                " (no step added an info key; a Collector stores env infos only for the keys "
                "named in info_keys / env.info_keys)"
            )
        raise AttributeError(f"{type(self).__name__} has no attribute or stored key {name!r}{hint}")

    @property
    def env_id(self) -> np.ndarray:
        """``[maxsize]`` the env that wrote each slot."""
        return self.layout.env_id

    @property
    def storage_arrays(self) -> dict[str, Any]:
        """The storage as a nested dict of ``[maxsize, ...]`` arrays (empty before the first
        add); parts read and, in their own bookkeeping, write it directly."""
        return {} if self._data is None else self._data

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays the buffer holds: the stored columns, the episode links and the
        sampler's and relabeller's own arrays (``nbytes / maxsize``: the cost of one slot)."""
        seen: set[int] = set()
        total = sum(_array_bytes(a, seen) for a in _leaves(self.storage_arrays))
        for part in (self.layout, self.sampler, self.relabeller):
            total += _array_bytes(part, seen)
        return total

    def keys(self) -> list[str]:
        """Stored top-level keys in storage order (``done`` is derived and not listed)."""
        return [] if self._data is None else list(self._data)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a stored top-level key (as listed by :meth:`keys`)."""
        return self._data is not None and key in self._data

    def seed(self, seed: int | None = None) -> None:
        """Reseed the generator that sampling and relabelling draw from."""
        self.rng = np.random.default_rng(seed)

    def _init_kwargs(self) -> dict[str, Any]:
        """Arguments that rebuild an empty buffer like this one (with :meth:`parts`)."""
        return {
            "size": self.size_requested,
            "num_envs": self.num_envs,
            "stack_num": self.stack_num,
            "ignore_obs_next": self.ignore_obs_next,
        }

    @classmethod
    def _from_parts(
        cls, init_kwargs: dict[str, Any], parts: dict[str, Any], storage: str = "memory",
        path: Any = None, trust_imports: bool = True,
    ) -> ReplayBuffer:
        """An empty buffer of this class from :meth:`_init_kwargs` and ``{keyword: [name,
        options]}`` parts, as buffer files record them, each part built again by its registry
        name (the base initialiser runs, whatever a subclass's own takes). Without
        ``trust_imports``, options that name code to import (a spec's ``import_fields``) are
        refused with :class:`~rlblocks.contracts.BufferFileError`."""
        if not trust_imports:
            from rlblocks.plugins import get_registry

            for name, options in parts.values():
                fields = get_registry("buffer").spec(str(name)).import_fields
                named = {k: v for k, v in (options or {}).items() if k in fields and v is not None}
                if named:
                    raise BufferFileError(
                        f"the buffer file names code to import for its part {name!r} ({named}); "
                        "load it with trust_imports=True only if you trust the file, or read it "
                        "into a buffer you built yourself with read_hdf5"
                    )
        kwargs = dict(init_kwargs)
        size, num_envs = int(kwargs.pop("size")), int(kwargs.pop("num_envs"))
        built = {kw: build_part(kw, str(n), dict(o or {}), size, num_envs)
                 for kw, (n, o) in parts.items()}  # fmt: skip
        buf = ReplayBuffer.__new__(cls)
        ReplayBuffer.__init__(buf, size, num_envs, storage=storage, path=path, **kwargs, **built)
        return buf

    def __repr__(self) -> str:
        name = type(self).__name__
        if self._data is None or len(self) == 0:
            return f"{name}()"
        valid = self.layout.valid_slots()
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

    def _set_storage(self, tree: Tree) -> None:
        self._data = tree
        self._leaves = [(p, a, a.shape[1:]) for p, a in _tree_leaves(tree)]
        # reads and writes go through plain ndarray views of memory-mapped arrays: indexing a
        # memmap runs Python hooks for every view it makes (several times the cost of copying
        # one step), and what is read is a copy either way
        self._plain = _tree_map(tree, _plain_view)
        self._sinks = [_plain_view(a) for _, a, _ in self._leaves]
        self._term = self._plain["terminated"]  # [maxsize] bool, shortcuts for add()
        self._trunc = self._plain["truncated"]
        self._set_fast_path(tree)
        self._rew_item = tuple(tree["rew"].shape[1:])
        self.layout.bind(self._term, self._trunc, self._plain["rew"])

    def _set_fast_path(self, tree: Tree) -> None:
        """Prepare add()'s fast path: a plain dict holding exactly the stored keys, its values
        arrays or (Dict observations) plain dicts of arrays one level deep, one step of every
        env. Getters pick the values in storage order, so one shape comparison checks them."""
        self._fast_len = -1
        subs: list[tuple[Any, int] | None] = []
        for node in tree.values():
            if not isinstance(node, dict):
                subs.append(None)
                continue
            if any(isinstance(v, dict) for v in node.values()):
                return  # deeper nesting takes the general path
            keys = list(node)
            getter = operator.itemgetter(*keys) if len(keys) > 1 else _OneGetter(keys[0])
            subs.append((getter, len(keys)))
        self._fast_get = operator.itemgetter(*tree)
        self._fast_subs = subs if any(sub is not None for sub in subs) else None
        self._fast_shapes = [(self.num_envs, *item) for _, _, item in self._leaves]
        self._fast_len = len(tree)

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
        """Add one step of one env or of ``N`` envs through the buffer's writer (see
        :meth:`write`; a writer such as ``"cached"`` may hold steps back until their episode
        ends). Returns ``(index, ep_rew, ep_len, ep_start)`` as :meth:`write` does."""
        if self.writer is not None:
            return self.writer.add(batch, env_ids)
        return self.write(batch, env_ids)

    def write(
        self, batch: Batch | Mapping[str, Any], env_ids: Any = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Write one step of one env (``rew`` is 0-d) or of ``N`` envs (``rew`` has shape ``[N]``).

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
        if writes is not None:  # the common case, checked in about a microsecond
            out = self.layout.write(self._env_range, self.num_envs, writes, batch["rew"])
            if self._watch:
                self.sampler.on_write(out[0])
            return out
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
            return empty, np.zeros((0, *self._rew_item)), empty.copy(), empty.copy()

        if self._data is None:
            self._allocate(leaves, single, n)

        # check every key and shape before writing anything
        if len(leaves) != len(self._leaves):
            raise self._key_error(set(leaves), "the added batch")
        writes = []
        for (path, _, item), arr in zip(self._leaves, self._sinks, strict=True):
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
        of arrays with exactly the stored keys (values that are dicts in storage, such as Dict
        observations, plain dicts of arrays with exactly their keys), one step of every env in
        env id order (``env_ids`` None or ``arange(num_envs)`` as int64)."""
        if type(batch) is not dict or len(batch) != self._fast_len:
            return None
        if env_ids is not None and (
            type(env_ids) is not np.ndarray
            or env_ids.dtype is not _INT64  # builtin dtypes are singletons; else: general path
            or env_ids.tobytes() != self._env_bytes
        ):
            return None
        try:  # anything with the right shapes is written by numpy assignment (as add() would)
            values = self._fast_get(batch)
            subs = self._fast_subs
            if subs is not None:  # flatten the dict values in storage order
                flat: list[Any] = []
                for value, sub in zip(values, subs):
                    if sub is None:
                        flat.append(value)
                    elif type(value) is dict and len(value) == sub[1]:
                        flat.extend(sub[0](value))
                    else:
                        return None
                values = flat
            if [v.shape for v in values] != self._fast_shapes:
                return None
        except (KeyError, AttributeError):
            return None
        return list(zip(self._sinks, values))

    def _write_step(
        self, envs: np.ndarray, n: int, writes: list[tuple[np.ndarray, Any]], rew: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        out = self.layout.write(envs, n, writes, rew)
        if self._watch:
            self.sampler.on_write(out[0])
        return out

    # --- episode structure (the layout's) -----------------------------------------------------

    def prev(self, index: Any) -> np.ndarray:
        """Slot of the previous step of the same episode; the slot itself at an episode's first
        (stored) step."""
        return self.layout.prev(index)

    def next(self, index: Any) -> np.ndarray:
        """Slot of the next step of the same episode; the slot itself at a done step or at the
        newest step of an episode that has not ended."""
        return self.layout.next(index)

    def unfinished_index(self) -> np.ndarray:
        """The newest slot of every env's episode that has not ended (in env id order)."""
        return self.layout.unfinished_index()

    def steps_after(self, index: np.ndarray) -> np.ndarray:
        """``[B]`` how many later steps of the same episode are stored after each slot."""
        return self.layout.steps_after(np.asarray(index, dtype=np.int64))

    def advance(self, index: np.ndarray, steps: np.ndarray) -> np.ndarray:
        """The slot ``steps`` later along ``next`` (``steps <= steps_after(index)``)."""
        return self.layout.advance(np.asarray(index, dtype=np.int64), np.asarray(steps))

    # --- sampling -----------------------------------------------------------------------------

    def sample_indices(self, batch_size: int) -> np.ndarray:
        """The same as :meth:`sample_index` (the name ARCHITECTURE.md uses)."""
        return self.sample_index(batch_size)

    def sample_index(self, batch_size: int) -> np.ndarray:
        """``batch_size > 0``: that many slots drawn by the sampler (uniformly random valid
        slots, with replacement, by default; ``[B, L]`` windows for a sequence sampler);
        ``0``: every valid slot in time (insertion) order; ``< 0``: an empty array."""
        if batch_size > 0:
            if len(self) == 0:
                raise ValueError("cannot sample from an empty buffer; add transitions first")
            return self.sampler.sample_index(batch_size)
        if batch_size == 0:
            return self.layout.time_order()
        return np.zeros(0, dtype=np.int64)

    def sample(self, batch_size: int) -> tuple[Batch, np.ndarray]:
        """``(self[indices], indices)`` with ``indices = self.sample_index(batch_size)``, rows
        rewritten by the relabeller when there is one."""
        indices = self.sample_index(batch_size)
        batch = self[indices]
        if self.relabeller is not None and batch_size > 0:
            self.relabeller.relabel(batch, indices)
        return batch, indices

    def _resolve(self, index: Any) -> Any:
        if type(index) is np.ndarray:  # sampled slots
            return index
        if isinstance(index, slice):
            return self.layout.time_order()[index]
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
        if stack_num == 1 and type(index) is np.ndarray:  # what sampling reads: one take each
            for key, node in self._plain.items():
                if type(node) is dict:
                    out[key] = _tree_map(node, lambda a: a.take(index, axis=0))
                else:
                    out[key] = node.take(index, axis=0)
                if key == "truncated":
                    out["done"] = out["terminated"] | out["truncated"]
        else:
            for key, node in self._plain.items():
                out[key] = self._gather(node, index, stack_num if key in STACKED_KEYS else 1)
                if key == "truncated":
                    out["done"] = out["terminated"] | out["truncated"]
        if self.ignore_obs_next and not storage_order:
            nxt = self.next(index)
            out["obs_next"] = self._gather(self._plain["obs"], nxt, stack_num)
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
        idx = self._resolve(index)
        batch = self._batch_of(idx, self.stack_num)
        if self._watch:
            for key, value in self.sampler.columns(idx).items():
                batch[key] = value
        return batch

    def get(self, index: Any, key: str, default: Any = None, stack_num: int | None = None) -> Any:
        """Value of ``key`` at ``index`` (as in ``__getitem__``); ``default`` if not stored.

        obs/obs_next/info/policy are stacked along axis 1 by following ``prev`` (``stack_num``
        defaults to the buffer's); ``obs_next`` is rebuilt when not stored; ``done`` is derived.
        Nested keys come back as a Batch.
        """
        stack = self.stack_num if stack_num is None else int(stack_num)
        if stack < 1:
            raise ValueError(f"stack_num must be >= 1, got {stack_num}")
        if self._data is None:
            return default
        data = self._plain
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

    def update(self, other: ReplayBuffer) -> np.ndarray:
        """Append ``other``'s valid transitions in its ``sample_index(0)`` order (time order;
        env by env when ``other`` has the per-env layout); return the slots written.

        Links are rebuilt from env ids and done flags as if the transitions had been added one
        by one: a transition continues the newest step of the same env unless that step was done
        (so an unfinished episode in ``self`` continues into ``other``'s first steps of that env).
        Running episode statistics advance the same way. Keys must match; ``obs_next`` is rebuilt
        from ``other`` when ``self`` stores it and ``other`` does not. When more transitions
        come than the layout holds, the newest stay. With a writer, the rows go through
        :meth:`add` step by step (each env's in order), so the writer sees them as it sees adds.
        """
        if self.writer is not None:
            return add_in_runs(self, other)
        rows = self._rows_of(other)
        if rows is None:
            return np.zeros(0, dtype=np.int64)
        cols, envs = rows
        return self._append(cols, envs, "the other buffer")

    def extend(self, rows: Batch | Mapping[str, Any], env_ids: Any) -> np.ndarray:
        """Write rows ``[T, ...]`` of envs ``env_ids [T]`` in time order, as if added one by one
        (bypassing the writer); return the slots that hold them. What a writer uses to admit a
        held-back episode in one call."""
        leaves: dict[Path, Any] = {}
        _flatten(rows, (), leaves)
        done = leaves.pop(("done",), None)
        if ("terminated",) not in leaves and done is not None:
            leaves[("terminated",)] = done
        envs = np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if ("truncated",) not in leaves:
            leaves[("truncated",)] = np.zeros(len(envs), dtype=bool)
        if self.ignore_obs_next:
            leaves = {p: v for p, v in leaves.items() if p[0] != "obs_next"}
        cols = {p: np.asarray(v) for p, v in leaves.items()}
        for p, col in cols.items():
            if col.shape[:1] != envs.shape:
                raise ValueError(
                    f"extend: key {_name(p)!r} has {col.shape[:1]} rows for {len(envs)} env ids"
                )
        if len(envs) and (envs.min() < 0 or envs.max() >= self.num_envs):
            raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {envs.tolist()}")
        if len(envs) == 0:
            return np.zeros(0, dtype=np.int64)
        return self._append(cols, envs, "the extended rows")

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
        in time order through the layout; return the slots written."""
        if self._data is None:
            self._allocate(cols, single=False, n=len(envs))
        if set(cols) != {p for p, _, _ in self._leaves}:
            raise self._key_error(set(cols), what)
        columns = [(arr, np.asarray(cols[p])) for (p, _, _), arr in zip(self._leaves, self._sinks)]
        done = np.asarray(cols[("terminated",)], bool) | np.asarray(cols[("truncated",)], bool)
        rew = np.asarray(cols[("rew",)])
        pos = self.layout.extend(columns, envs, rew, done)
        if self._watch and len(pos):
            self.sampler.on_write(pos)
        return pos

    def reset(self, keep_statistics: bool = False) -> None:
        """Forget all transitions (the storage arrays and their keys stay allocated).

        With ``keep_statistics`` the running return/length of episodes in progress survive, so
        an on-policy loop that clears the buffer between updates still reports whole episodes;
        their next step starts a fresh link chain either way."""
        self.layout.reset(keep_statistics)
        self.sampler.on_reset()
        if self.writer is not None:
            self.writer.reset(keep_statistics)

    def truncate_unfinished(self, env_ids: Any = None) -> np.ndarray:
        """Mark the newest step of every unfinished episode as truncated and end it there (e.g.
        after loading a buffer whose envs restart); return those slots. ``env_ids``: only the
        episodes of these envs (e.g. those a restarted env worker ran). A writer that holds
        episodes back admits them, truncated."""
        if self.writer is not None:
            return self.writer.truncate_unfinished(env_ids)
        return self.layout.truncate_unfinished(env_ids)


def _nest(cols: dict[Path, Any], rows: Any) -> dict[str, Any]:
    """``{path: column}`` -> nested dict of ``column[rows]`` (the form ``add`` takes)."""
    out: dict[str, Any] = {}
    for path, col in cols.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = col[rows]
    return out


def add_in_runs(buf: ReplayBuffer, other: ReplayBuffer) -> np.ndarray:
    """Add ``other``'s valid transitions to ``buf`` through ``buf.add``, keeping each env's
    order: round ``k`` adds the ``k``-th transition of every env that has one (one ``add`` per
    round). Returns the slots ``add`` reported, in the order the rows were added."""
    rows = buf._rows_of(other)
    if rows is None:
        return np.zeros(0, dtype=np.int64)
    cols, envs = rows
    counts = np.bincount(envs)
    order = np.argsort(envs, kind="stable")
    rank = np.empty(len(envs), dtype=np.int64)
    rank[order] = np.arange(len(envs)) - np.repeat(np.cumsum(counts) - counts, counts)
    order = np.lexsort((envs, rank))  # round by round, env ids ascending inside a round
    bounds = np.flatnonzero(np.diff(rank[order])) + 1
    out = [buf.add(_nest(cols, r), env_ids=envs[r])[0] for r in np.split(order, bounds)]
    return np.concatenate(out)


def _leaves(tree: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for value in tree.values():
        out.extend(_leaves(value) if isinstance(value, Mapping) else [value])
    return out


def _array_bytes(obj: Any, seen: set[int], depth: int = 2) -> int:
    """Bytes of the numpy arrays ``obj`` is or holds in its attributes (``depth`` levels down,
    each array counted once; views count as their base)."""
    if isinstance(obj, np.ndarray):
        base = obj if obj.base is None or not isinstance(obj.base, np.ndarray) else obj.base
        if id(base) in seen:
            return 0
        seen.add(id(base))
        return int(base.nbytes)
    if obj is None or depth == 0 or not hasattr(obj, "__dict__"):
        return 0
    return sum(_array_bytes(v, seen, depth - 1) for v in vars(obj).values())
