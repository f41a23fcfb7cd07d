"""Files of a replay buffer: hdf5 save/load and memory-mapped storage.

:class:`BufferFiles` is a mixin of :class:`~rlblocks.buffer.ReplayBuffer` (it uses the buffer's
storage, layout and parts, whose ``state()`` / ``arrays()`` / ``load()`` say what the files
keep of them). A file records the buffer's arguments and its parts by registry name, and is
read back by building those parts again; ``ReplayBuffer.load_hdf5`` and ``buf.read_hdf5`` are
the two ways in.

hdf5 files are written atomically (temporary file, fsync, rename) and never pickle anything.
With ``storage="memmap"`` every array lives in a ``.npy`` file under ``path``; :meth:`flush`
writes the bookkeeping beside them, and a buffer built again on the same ``path`` continues.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

from rlblocks.contracts import BufferFileError, ConfigError
from rlblocks.replay._tree import Path, Tree, _name, _tree_leaves

_HDF5_FORMAT = "rlblocks.buffer"
_HDF5_VERSION = 2
# memory-mapped storage: the bookkeeping arrays and the scalar state, in one file replaced
# atomically by flush() (the storage arrays are the data.*.npy files beside it)
_STATE_FILE = "buffer.state.npz"


def _fsync_dir(directory: str) -> None:
    """Make a rename inside ``directory`` durable (not possible on every platform)."""
    with suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class BufferFiles:
    """hdf5 files and memory-mapped storage of a :class:`~rlblocks.buffer.ReplayBuffer` (a
    mixin: the buffer provides its storage, layout and parts)."""

    # provided by the buffer
    _data: Tree | None
    _leaves: list[tuple[Path, np.ndarray, tuple[int, ...]]]
    rng: np.random.Generator
    layout: Any
    sampler: Any
    writer: Any
    maxsize: int
    num_envs: int
    stack_num: int
    ignore_obs_next: bool
    storage: str
    path: Any

    def _init_kwargs(self) -> dict[str, Any]:  # pragma: no cover - the buffer defines it
        raise NotImplementedError

    def parts(self) -> dict[str, tuple[str, dict[str, Any]]]:  # pragma: no cover
        raise NotImplementedError

    def _set_storage(self, tree: Tree) -> None:  # pragma: no cover - the buffer defines it
        raise NotImplementedError

    @classmethod
    def _from_parts(  # pragma: no cover - the buffer defines it
        cls, init_kwargs: dict[str, Any], parts: dict[str, Any], storage: str, path: Any,
        trust_imports: bool,
    ) -> Any:
        raise NotImplementedError

    def _description(self) -> dict[str, Any]:
        """What identifies the buffer's make-up in its files: arguments and parts by name."""
        return {"init_kwargs": self._init_kwargs(),
                "parts": {k: [n, o] for k, (n, o) in self.parts().items()}}

    def _reopen_if_saved(self) -> None:
        """With memmap storage: continue the buffer flushed to ``path`` before, if there is one
        (the buffer calls this at the end of its ``__init__``)."""
        if self.storage == "memmap" and os.path.exists(os.path.join(self.path, _STATE_FILE)):
            self._open_memmap()

    def _part_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Scalars and arrays of the layout, sampler and writer, with prefixed names."""
        scalars: dict[str, Any] = {"layout": self.layout.state()}
        arrays = {f"meta.{k}": v for k, v in self.layout.arrays().items()}
        for kind, part in (("sampler", self.sampler), ("writer", self.writer)):
            if part is None:
                continue
            st, arr = part.state()
            scalars[kind] = st
            arrays.update({f"{kind}.{k}": v for k, v in arr.items()})
        return scalars, arrays

    def _load_part_state(self, scalars: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        def prefixed(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}

        self.layout.load(scalars["layout"], prefixed("meta."))
        for kind, part in (("sampler", self.sampler), ("writer", self.writer)):
            if part is not None:
                part.load(scalars.get(kind, {}), prefixed(f"{kind}."))

    # --- memory-mapped storage ------------------------------------------------------------------

    def _new_array(self, path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zeroed storage array: in RAM, or a ``.npy`` file mapped into memory."""
        if self.storage == "memory":
            try:
                return np.zeros(shape, dtype=dtype)
            except MemoryError as exc:
                need = int(np.prod(shape, dtype=np.float64) * dtype.itemsize)
                raise ConfigError(
                    f"the buffer cannot hold {self.maxsize} steps of {_name(path)!r} in memory "
                    f"({need / 2**30:.1f} GiB for that key alone); lower buffer.size, or keep "
                    "its arrays on disk with buffer.storage=memmap"
                ) from exc
        if dtype.kind == "O":
            raise TypeError(
                f"key {_name(path)!r} holds Python objects, which a memory-mapped buffer cannot "
                "store in a file; store it as a numeric or fixed-width bytes array"
            )
        target = os.path.join(self.path, "data." + ".".join(path) + ".npy")
        try:
            os.makedirs(self.path, exist_ok=True)
            # made under a fresh name (created exclusively: no link there is followed), then
            # renamed into place, which replaces whatever entry had the name (a link, not its
            # target)
            fd, tmp = tempfile.mkstemp(prefix=".data.", suffix=".npy.tmp", dir=self.path)
        except OSError as exc:
            raise BufferFileError(
                f"cannot create the memory-mapped buffer file {target}: "
                f"{exc.strerror or exc}; point buffer.path at a writable directory with room "
                "for the buffer"
            ) from exc
        os.close(fd)
        try:
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
            os.replace(tmp, target)
        except BaseException as exc:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise BufferFileError(
                    f"cannot create the memory-mapped buffer file {target}: "
                    f"{exc.strerror or exc}; point buffer.path at a writable directory with "
                    "room for the buffer"
                ) from exc
            raise
        return arr

    def flush(self) -> None:
        """Make a memory-mapped buffer durable: write the mapped arrays out, then the
        bookkeeping (pointers, episode statistics, ...) next to them in one file that replaces
        the previous one atomically, so a crash during a flush leaves the last complete one. A
        buffer built again with the same ``path`` continues from the last flush. (The mapped
        arrays change in place: steps added after the last flush that overwrote old slots are
        seen in those slots; flush as often as losing that matters.) Does nothing for in-memory
        storage."""
        if self.storage != "memmap":
            return
        os.makedirs(self.path, exist_ok=True)
        for _, arr, _ in self._leaves:
            arr.flush()
        scalars, arrays = self._part_state()
        state = {
            **self._description(),
            "keys": [list(p) for p, _, _ in self._leaves],
            "parts_state": scalars,
            "rng_state": self.rng.bit_generator.state,
        }
        target = os.path.join(self.path, _STATE_FILE)
        # a fresh temporary (created exclusively, so no link is followed), renamed over the file
        fd, tmp = tempfile.mkstemp(prefix=f".{_STATE_FILE}.", suffix=".tmp", dir=self.path)
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, state=np.array(json.dumps(state)), **arrays)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.path)

    def _open_memmap(self) -> None:
        try:
            self._open_memmap_checked()
        except BufferFileError:
            raise
        except Exception as exc:  # zip, npy, json and numpy errors of a damaged state file
            raise BufferFileError(
                f"the memory-mapped buffer in {self.path!r} is damaged ({type(exc).__name__}: "
                f"{exc}); remove the directory to start a new buffer"
            ) from exc

    def _data_file(self, path: Sequence[str]) -> str:
        """The ``.npy`` file of one storage key, refused when the key would leave the buffer's
        directory (a crafted state file must not map files elsewhere)."""
        for part in path:
            if (not isinstance(part, str) or not part or part in {".", ".."}
                    or "/" in part or os.sep in part or "\0" in part):  # fmt: skip
                raise BufferFileError(
                    f"the buffer state in {self.path!r} names an invalid key {list(path)!r}"
                )
        root = os.path.realpath(self.path)
        entry = os.path.join(root, "data." + ".".join(path) + ".npy")
        file = os.path.realpath(entry)
        if os.path.dirname(file) != root:
            raise BufferFileError(
                f"the buffer state in {self.path!r} points outside the buffer directory"
            )
        if os.path.islink(entry):  # mapped read-write: a link would have it write elsewhere
            raise BufferFileError(
                f"{entry} is a symbolic link; a memory-mapped buffer never writes through one: "
                "replace it with the file itself, or delete the buffer directory to start anew"
            )
        return file

    def _open_memmap_checked(self) -> None:
        with np.load(os.path.join(self.path, _STATE_FILE), allow_pickle=False) as saved:
            state = json.loads(str(saved["state"]))
            mine = json.loads(json.dumps(self._description()))
            theirs = {k: state.get(k) for k in mine}
            if theirs != mine:
                raise BufferFileError(
                    f"the buffer in {self.path!r} differs from this one: "
                    f"{_differences(theirs, mine)}; build it with the same arguments and parts "
                    "to continue it, or use another path for a new buffer"
                )
            arrays = {k: saved[k] for k in saved.files if k != "state"}
        try:
            self._load_part_state(state["parts_state"], arrays)
        except (KeyError, ValueError, TypeError) as exc:
            raise BufferFileError(f"the buffer state in {self.path!r}: {exc}") from exc
        size = len(self)  # type: ignore[arg-type]
        if state["keys"]:
            tree: Tree = {}
            for path in state["keys"]:
                file = self._data_file(path)
                # read-only first: numpy's "r+" would silently extend a truncated file with zeros
                arr = np.load(file, mmap_mode="r")
                if arr.dtype.kind == "O" or arr.shape[:1] != (self.maxsize,):
                    raise BufferFileError(
                        f"{file}: shape {arr.shape} {arr.dtype} does not fit a buffer of "
                        f"{self.maxsize}"
                    )
                header = arr.offset if isinstance(arr, np.memmap) else 0
                if os.path.getsize(file) != header + arr.nbytes:
                    raise BufferFileError(f"{file} is truncated or padded")
                del arr
                arr = np.load(file, mmap_mode="r+")
                node = tree
                for key in path[:-1]:
                    node = node.setdefault(key, {})
                node[path[-1]] = arr
            self._set_storage(tree)
        elif size:
            raise BufferFileError(f"the buffer state in {self.path!r} has {size} rows but no data")
        self.rng.bit_generator.state = state["rng_state"]

    # --- hdf5 files -----------------------------------------------------------------------------

    def save_hdf5(
        self,
        path: str | os.PathLike[str],
        compression: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the whole buffer (storage, links, pointer, running episode stats, generator
        state) to an hdf5 file. Nested keys become groups; nothing is pickled, so object arrays
        are refused with an error naming the key. ``metadata`` (plain JSON data: how a dataset
        was made) goes into the file's ``dataset`` attribute, as JSON.

        The file is written atomically: to a temporary file in the same directory, flushed and
        fsynced, then renamed over ``path``; a failure leaves an existing file untouched.
        ``compression`` is passed to h5py for the data arrays (``"gzip"``, ``"lzf"``).
        """
        import h5py

        for p, arr, _ in self._leaves:
            if arr.dtype.kind in "OUV":
                raise TypeError(
                    f"cannot save key {_name(p)!r} (dtype {arr.dtype}) to hdf5: the file format "
                    "holds only numeric, bool and fixed-width bytes arrays and never pickles. "
                    "Store that key as such an array (e.g. np.asarray(x, dtype='S')), leave it "
                    "out of the batches you add, or pickle the buffer if you trust its readers"
                )
        target = os.path.abspath(os.fspath(path))
        directory, base = os.path.split(target)
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
        os.close(fd)
        try:
            with h5py.File(tmp, "w", track_order=True) as f:
                self._write_hdf5(f, compression)
                if metadata is not None:
                    f.attrs["dataset"] = json.dumps(dict(metadata), sort_keys=True)
                f.flush()
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(directory)

    def _write_hdf5(self, f: Any, compression: str | None) -> None:
        f.attrs["format"] = _HDF5_FORMAT
        f.attrs["format_version"] = _HDF5_VERSION
        f.attrs["class"] = "rlblocks.buffer:ReplayBuffer"
        desc = self._description()
        f.attrs["init_kwargs"] = json.dumps(desc["init_kwargs"])
        f.attrs["parts"] = json.dumps(desc["parts"])
        # also as plain attributes, for people and tools reading the file without rlblocks
        f.attrs["maxsize"] = self.maxsize
        f.attrs["num_envs"] = self.num_envs
        f.attrs["stack_num"] = self.stack_num
        f.attrs["ignore_obs_next"] = self.ignore_obs_next
        f.attrs["size"] = len(self)  # type: ignore[arg-type]
        f.attrs["rng_state"] = json.dumps(self.rng.bit_generator.state)
        scalars, arrays = self._part_state()
        f.attrs["parts_state"] = json.dumps(scalars)
        meta = f.create_group("meta")
        for name, value in arrays.items():
            meta.create_dataset(name, data=value)
        if self._data is None:
            return

        # a buffer that is not full yet writes only its valid rows: the datasets keep their
        # full length, but chunks never written take no space in the file (and read as zeros)
        valid = self.layout.valid_slots()
        partial = isinstance(valid, slice) and len(range(*valid.indices(self.maxsize))) < (
            self.maxsize
        )

        def write(group: Any, tree: Tree) -> None:
            for key, node in tree.items():
                if isinstance(node, dict):
                    write(group.create_group(key, track_order=True), node)
                elif partial and node.size:
                    ds = group.create_dataset(
                        key, shape=node.shape, dtype=node.dtype, chunks=True,
                        compression=compression,
                    )
                    ds[valid] = node[valid]
                else:
                    group.create_dataset(key, data=node, compression=compression)

        write(f.create_group("data", track_order=True), self._data)

    @classmethod
    def load_hdf5(
        cls, path: str | os.PathLike[str], storage: str = "memory",
        storage_path: str | os.PathLike[str] | None = None, trust_imports: bool = False,
    ) -> Any:
        """Read a buffer written by :meth:`save_hdf5`, rebuilt from the parts the file names
        (registry names of installed parts; nothing is unpickled). A file whose parts name
        code to import (HER's ``compute_reward="pkg.mod:fn"``) is refused unless
        ``trust_imports``. ``storage="memmap"`` with ``storage_path`` puts the loaded arrays in
        memory-mapped files. A damaged or foreign file raises
        :class:`~rlblocks.errors.BufferFileError`."""
        import h5py

        with _reading(path), h5py.File(os.fspath(path), "r") as f:
            init_kwargs, parts = _file_description(f, path)
            buf = cls._from_parts(init_kwargs, parts, storage=storage, path=storage_path,
                                  trust_imports=trust_imports)  # fmt: skip
            buf._read_hdf5(f)
        return buf

    def read_hdf5(self, path: str | os.PathLike[str]) -> None:
        """Replace this buffer's contents with a file written by :meth:`save_hdf5` from a
        buffer of the same make-up (arguments and parts), keeping this buffer's storage kind
        (a memory-mapped buffer stays memory-mapped: what a resumed run needs)."""
        import h5py

        with _reading(path), h5py.File(os.fspath(path), "r") as f:
            init_kwargs, parts = _file_description(f, path)
            mine = json.loads(json.dumps(self._description()))
            theirs = {"init_kwargs": init_kwargs, "parts": parts}
            if theirs != mine:
                raise BufferFileError(
                    f"{os.fspath(path)!r} holds another kind of buffer: "
                    f"{_differences(theirs, mine)}; read it into a buffer of the same "
                    "make-up, or load it with load_hdf5"
                )
            self._read_hdf5(f)

    def _read_hdf5(self, f: Any) -> None:
        import h5py

        version = int(f.attrs["format_version"])
        meta = {k: np.asarray(v[()]) for k, v in f["meta"].items() if not isinstance(v, h5py.Group)}
        if version == 1:  # the bookkeeping of a layout, unprefixed; index and size as attrs
            scalars = {"layout": {"index": int(f.attrs.get("index", 0)),
                                  "size": int(f.attrs["size"]), **_V1_LAYOUT_STATE(f)}}
            arrays = {f"meta.{k}": v for k, v in meta.items() if k != "priority"}
            if "priority" in meta:
                arrays["sampler.priority"] = meta["priority"]
                scalars["sampler"] = {"max_priority": float(f.attrs["max_priority"]),
                                      "env_step": int(f.attrs["env_step"])}
        else:
            scalars = json.loads(f.attrs["parts_state"])
            arrays = meta
        if "data" in f:
            def read(group: Any) -> Tree:
                tree: Tree = {}
                for key, node in group.items():
                    tree[key] = read(node) if isinstance(node, h5py.Group) else np.asarray(node[()])
                return tree

            tree = read(f["data"])
            for p, arr in _tree_leaves(tree):
                if arr.shape[:1] != (self.maxsize,):
                    raise ValueError(f"hdf5 key {_name(p)!r} has {arr.shape[0]} slots, expected "
                                     f"{self.maxsize}")
            if self.storage == "memmap":  # copy into mapped files: the buffer keeps its kind
                mapped: Tree = {}
                for p, arr in _tree_leaves(tree):
                    node = mapped
                    for key in p[:-1]:
                        node = node.setdefault(key, {})
                    node[p[-1]] = self._new_array(p, arr.shape, arr.dtype)
                    node[p[-1]][...] = arr
                tree = mapped
            self._set_storage(tree)
        self._load_part_state(scalars, arrays)
        self.rng.bit_generator.state = json.loads(f.attrs["rng_state"])
        if "cache" in f and self.writer is not None:  # a v1 cached buffer's caches
            raise ValueError("version 1 files of the cached buffer cannot be read; save it again")
        self.flush()


def _V1_LAYOUT_STATE(f: Any) -> dict[str, Any]:
    """Scalar layout state a version 1 file kept outside ``meta`` (none so far)."""
    return {}


#: Buffer classes of version 1 files (one class per combination) and the parts they were.
_V1_CLASSES: dict[str, dict[str, list[Any]]] = {
    "rlblocks.buffer:ReplayBuffer": {"layout": ["replay", {}]},
    "rlblocks_buffer_vector.buffer:VectorReplayBuffer": {"layout": ["vector", {}]},
    "rlblocks_buffer_prioritized.buffer:PrioritizedReplayBuffer": {
        "layout": ["replay", {}], "sampler": ["prioritized", None]},
    "rlblocks_buffer_prioritized.buffer:PrioritizedVectorReplayBuffer": {
        "layout": ["vector", {}], "sampler": ["prioritized", None]},
    "rlblocks_buffer_her.buffer:HERReplayBuffer": {
        "layout": ["replay", {}], "relabel": ["her", None]},
    "rlblocks_buffer_her.buffer:HERVectorReplayBuffer": {
        "layout": ["vector", {}], "relabel": ["her", None]},
}
_V1_PART_OPTIONS = {
    "sampler": ("alpha", "beta", "beta_final", "beta_anneal_steps", "eps"),
    "relabel": ("k", "strategy", "compute_reward", "terminate_on_success", "compute_terminated"),
}


def _file_description(f: Any, path: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(init_kwargs, parts)`` a buffer file was written with (version 1 files mapped)."""
    if f.attrs.get("format") != _HDF5_FORMAT:
        raise BufferFileError(f"{os.fspath(path)!r} is not an rlblocks buffer file")
    version = int(f.attrs["format_version"])
    if version > _HDF5_VERSION:
        raise BufferFileError(
            f"{os.fspath(path)!r} has buffer format {version}; this rlblocks reads up to "
            f"{_HDF5_VERSION}, upgrade it"
        )
    init_kwargs = json.loads(f.attrs["init_kwargs"])
    if version >= 2:
        return init_kwargs, json.loads(f.attrs["parts"])
    saved = str(f.attrs["class"])
    if saved not in _V1_CLASSES:
        raise BufferFileError(f"{os.fspath(path)!r} holds a {saved}, which this rlblocks cannot "
                              "rebuild; save it again with the buffer's own version")
    parts = {k: [n, dict(o) if o is not None else {}] for k, (n, o) in _V1_CLASSES[saved].items()}
    for kind, names in _V1_PART_OPTIONS.items():
        if kind in parts:
            parts[kind][1] = {n: init_kwargs.pop(n) for n in names if n in init_kwargs}
    parts.setdefault("sampler", ["uniform", {}])
    init_kwargs.setdefault("stack_num", 1)
    return init_kwargs, parts


def _show(value: Any, part: bool) -> str:
    if value is None:
        return "none"
    if part:
        return repr(value[0]) + (f" {value[1]}" if value[1] else "")
    return repr(value)


def _differences(theirs: dict[str, Any], mine: dict[str, Any]) -> str:
    """``"layout 'vector' there, 'replay' here; size 16 there, 32 here"`` for two make-ups."""
    out = []
    for group in ("init_kwargs", "parts"):
        a, b = theirs.get(group) or {}, mine.get(group) or {}
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                there, here = (_show(v, group == "parts") for v in (a.get(key), b.get(key)))
                out.append(f"{key} {there} there, {here} here")
    return "; ".join(out)


def save_hdf5(buffer: Any, path: str | os.PathLike[str], compression: str | None = None) -> None:
    """Write ``buffer`` to an hdf5 file, atomically (see ``ReplayBuffer.save_hdf5``)."""
    buffer.save_hdf5(path, compression)


@contextmanager
def _reading(path: Any) -> Iterator[None]:
    """Turn any error while reading a buffer file into a BufferFileError naming the file."""
    try:
        yield
    except BufferFileError:
        raise
    except Exception as exc:  # h5py raises OSError, KeyError, ValueError, RuntimeError...
        raise BufferFileError(
            f"cannot read the buffer file {os.fspath(path)!r}: {type(exc).__name__}: {exc}"
        ) from exc
