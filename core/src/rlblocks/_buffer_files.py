"""Files of a replay buffer: hdf5 save/load and memory-mapped storage.

:class:`BufferFiles` is a mixin of :class:`~rlblocks.buffer.ReplayBuffer` (it uses the buffer's
storage, bookkeeping and ``_META_ARRAYS``); buffer plugins extend ``_write_hdf5`` /
``_read_hdf5`` and ``_state`` / ``_set_state`` for what they keep beside the base buffer.

hdf5 files are written atomically (temporary file, fsync, rename) and never pickle anything.
With ``storage="memmap"`` every array lives in a ``.npy`` file under ``path``; :meth:`flush`
writes the bookkeeping beside them, and a buffer built again on the same ``path`` continues.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from rlblocks._buffer_tree import Path, Tree, _name, _tree_leaves
from rlblocks.errors import BufferFileError

_HDF5_FORMAT = "rlblocks.buffer"
_HDF5_VERSION = 1
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
    """hdf5 files and memory-mapped storage (a mixin of the replay buffer)."""

    # provided by the buffer
    _META_ARRAYS: tuple[str, ...]
    _data: Tree | None
    _leaves: list[tuple[Path, np.ndarray, tuple[int, ...]]]
    _index: int
    _size: int
    _rng: np.random.Generator
    maxsize: int
    num_envs: int
    stack_num: int
    ignore_obs_next: bool
    storage: str
    path: Any

    def _init_kwargs(self) -> dict[str, Any]:  # pragma: no cover - the buffer defines it
        raise NotImplementedError

    def _set_storage(self, tree: Tree) -> None:  # pragma: no cover - the buffer defines it
        raise NotImplementedError

    def _reopen_if_saved(self) -> None:
        """With memmap storage: continue the buffer flushed to ``path`` before, if there is one
        (subclasses call this at the end of their ``__init__``)."""
        if self.storage == "memmap" and os.path.exists(os.path.join(self.path, _STATE_FILE)):
            self._open_memmap()

    # --- memory-mapped storage ------------------------------------------------------------------

    def _new_array(self, path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A zeroed storage array: in RAM, or a ``.npy`` file mapped into memory."""
        if self.storage == "memory":
            return np.zeros(shape, dtype=dtype)
        if dtype.kind == "O":
            raise TypeError(
                f"key {_name(path)!r} holds Python objects, which a memory-mapped buffer cannot "
                "store in a file; store it as a numeric or fixed-width bytes array"
            )
        os.makedirs(self.path, exist_ok=True)
        return np.lib.format.open_memmap(
            os.path.join(self.path, "data." + ".".join(path) + ".npy"), mode="w+", dtype=dtype,
            shape=shape,
        )

    def _state(self) -> dict[str, Any]:
        """Scalar state beside the arrays (written by :meth:`flush`; subclasses add theirs)."""
        return {"index": self._index, "size": self._size,
                "rng_state": self._rng.bit_generator.state}

    def _set_state(self, state: dict[str, Any]) -> None:
        self._index, self._size = int(state["index"]), int(state["size"])
        self._rng.bit_generator.state = state["rng_state"]

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
        state = {
            "class": f"{type(self).__module__}:{type(self).__qualname__}",
            "init_kwargs": self._init_kwargs(),
            "keys": [list(p) for p, _, _ in self._leaves],
            **self._state(),
        }
        arrays = {f"meta.{name}": getattr(self, f"_{name}") for name in self._META_ARRAYS}
        target = os.path.join(self.path, _STATE_FILE)
        tmp = target + ".tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, state=np.array(json.dumps(state)), **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
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
        file = os.path.realpath(os.path.join(root, "data." + ".".join(path) + ".npy"))
        if os.path.dirname(file) != root:
            raise BufferFileError(
                f"the buffer state in {self.path!r} points outside the buffer directory"
            )
        return file

    def _open_memmap_checked(self) -> None:
        with np.load(os.path.join(self.path, _STATE_FILE), allow_pickle=False) as saved:
            state = json.loads(str(saved["state"]))
            mine = f"{type(self).__module__}:{type(self).__qualname__}"
            if state["class"] != mine:
                raise BufferFileError(
                    f"the buffer in {self.path!r} is a {state['class']}, not a {mine}; open it "
                    "with that buffer type, or use another path for a new buffer"
                )
            if state["init_kwargs"] != self._init_kwargs():
                raise BufferFileError(
                    f"the buffer in {self.path!r} was made with {state['init_kwargs']}, not "
                    f"{self._init_kwargs()}; use the same arguments, or another path for a new "
                    "buffer"
                )
            meta = {name: saved[f"meta.{name}"] for name in self._META_ARRAYS}
        for name, value in meta.items():
            mine_arr = getattr(self, f"_{name}")
            if value.shape != mine_arr.shape or value.dtype.kind != mine_arr.dtype.kind:
                raise BufferFileError(
                    f"the buffer state in {self.path!r}: {name} has shape {value.shape} "
                    f"{value.dtype}, expected {mine_arr.shape} {mine_arr.dtype}"
                )
            setattr(self, f"_{name}", value.astype(mine_arr.dtype, copy=False))
        index, size = int(state["index"]), int(state["size"])
        if not (0 <= size <= self.maxsize and 0 <= index < max(self.maxsize, 1)):
            raise BufferFileError(
                f"the buffer state in {self.path!r} has index {index} and size {size}, outside a "
                f"buffer of {self.maxsize}"
            )
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
            rew_item = tree["rew"].shape[1:]
            if rew_item != self._ep_rew.shape[1:]:
                raise BufferFileError(
                    f"saved running returns do not match rew of shape {rew_item}"
                )
        elif size:
            raise BufferFileError(f"the buffer state in {self.path!r} has {size} rows but no data")
        self._set_state(state)

    # --- hdf5 files -----------------------------------------------------------------------------

    def save_hdf5(self, path: str | os.PathLike[str], compression: str | None = None) -> None:
        """Write the whole buffer (storage, links, pointer, running episode stats, generator
        state) to an hdf5 file. Nested keys become groups; nothing is pickled, so object arrays
        are refused with an error naming the key.

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
        cls = type(self)
        f.attrs["format"] = _HDF5_FORMAT
        f.attrs["format_version"] = _HDF5_VERSION
        f.attrs["class"] = f"{cls.__module__}:{cls.__qualname__}"
        f.attrs["init_kwargs"] = json.dumps(self._init_kwargs())
        # also as plain attributes, for people and tools reading the file without rlblocks
        f.attrs["maxsize"] = self.maxsize
        f.attrs["num_envs"] = self.num_envs
        f.attrs["stack_num"] = self.stack_num
        f.attrs["ignore_obs_next"] = self.ignore_obs_next
        f.attrs["index"] = self._index
        f.attrs["size"] = self._size
        f.attrs["rng_state"] = json.dumps(self._rng.bit_generator.state)
        meta = f.create_group("meta")
        for name in self._META_ARRAYS:
            meta.create_dataset(name, data=getattr(self, f"_{name}"))
        if self._data is None:
            return

        def write(group: Any, tree: Tree) -> None:
            for key, node in tree.items():
                if isinstance(node, dict):
                    write(group.create_group(key, track_order=True), node)
                else:
                    group.create_dataset(key, data=node, compression=compression)

        write(f.create_group("data", track_order=True), self._data)

    @classmethod
    def load_hdf5(cls, path: str | os.PathLike[str]) -> Any:
        """Read a buffer written by :meth:`save_hdf5` (nothing is unpickled); a damaged or
        foreign file raises :class:`~rlblocks.errors.BufferFileError` naming it."""
        try:
            return cls._load_hdf5(path)
        except BufferFileError:
            raise
        except Exception as exc:  # h5py raises OSError, KeyError, ValueError, RuntimeError...
            raise BufferFileError(
                f"cannot read the buffer file {os.fspath(path)!r}: {type(exc).__name__}: {exc}"
            ) from exc

    @classmethod
    def _load_hdf5(cls, path: str | os.PathLike[str]) -> Any:
        import h5py

        with h5py.File(os.fspath(path), "r") as f:
            if f.attrs.get("format") != _HDF5_FORMAT:
                raise ValueError(f"{os.fspath(path)!r} is not an rlblocks buffer file")
            version = int(f.attrs["format_version"])
            if version > _HDF5_VERSION:
                raise ValueError(
                    f"{os.fspath(path)!r} has buffer format {version}; this rlblocks reads up to "
                    f"{_HDF5_VERSION}, upgrade it"
                )
            saved = str(f.attrs["class"])
            mine = f"{cls.__module__}:{cls.__qualname__}"
            if saved != mine:
                raise ValueError(
                    f"{os.fspath(path)!r} holds a {saved}; load it with that class's load_hdf5 "
                    f"(this is {mine})"
                )
            buf = cls(**json.loads(f.attrs["init_kwargs"]))
            buf._read_hdf5(f)
        return buf

    def _read_hdf5(self, f: Any) -> None:
        import h5py

        self._index = int(f.attrs["index"])
        self._size = int(f.attrs["size"])
        self._rng.bit_generator.state = json.loads(f.attrs["rng_state"])
        meta = f["meta"]
        for name in self._META_ARRAYS:
            value = np.asarray(meta[name][()])
            current = getattr(self, f"_{name}")
            if value.shape[:1] != current.shape[:1]:
                raise ValueError(f"hdf5 metadata {name!r} has shape {value.shape}, "
                                 f"expected {current.shape}")
            setattr(self, f"_{name}", value.astype(current.dtype, copy=False))
        if "data" not in f:
            return

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
        self._set_storage(tree)
