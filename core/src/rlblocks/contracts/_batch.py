"""``Batch``: the nested container that data travels in between rlblocks' modules.

A Batch is a dict whose keys are also attributes, and at the same time an array whose rows can be
indexed, sliced, concatenated and split. Values ("leaves") are numpy arrays, torch tensors, nested
Batches or plain scalars; indexing a Batch indexes every array and tensor leaf at once, so an
env step, a policy output and a replay-buffer sample all share one type.

    >>> import numpy as np, torch
    >>> data = Batch(a=4, b=[5, 5], c='2312312', d=('a', -2, -3))
    >>> data.b
    array([5, 5])
    >>> data.b = np.array([3, 4, 5])
    >>> print(data)
    Batch(
        a: 4,
        b: array([3, 4, 5]),
        c: '2312312',
        d: array(['a', '-2', '-3'], dtype=object),
    )
    >>> data = Batch(obs={'index': np.zeros((2, 3))}, act=torch.zeros((2, 2)))
    >>> data[:, 1] += 6
    >>> print(data[-1])
    Batch(
        obs: Batch(
                 index: array([0., 6., 0.]),
             ),
        act: tensor([0., 6.]),
    )

How values are stored (on construction and on every assignment):

* dicts (any ``Mapping``) become nested Batches;
* lists and tuples become numpy arrays; text ends up in ``object`` arrays (so that assigning a
  longer string later never truncates it), ragged lists in 1-d ``object`` arrays, a list of
  dicts/Batches becomes their :meth:`Batch.stack`, and a list of tensors their ``torch.stack``;
* numpy arrays, torch tensors and Batches are stored as they are, without a copy;
* scalars, strings, ``None`` and any other object are stored as they are.

Scalars are per-batch constants rather than per-row data: indexing keeps them, index assignment
leaves them alone, and they do not count towards ``len``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any, ClassVar

import numpy as np
import torch

__all__ = ["Batch"]

# Leaves that indexing reaches into. Checked with isinstance, so subclasses (Parameter, ...) count.
_ARRAYS = (np.ndarray, torch.Tensor)
_MISSING: Any = object()


def _new_batch() -> Batch:
    """An empty plain Batch made without running ``__init__`` (fast path for derived batches)."""
    return object.__new__(Batch)


def _to_array(seq: Sequence[Any]) -> np.ndarray:
    """``np.asarray``, except that text becomes ``object`` and ragged input a 1-d object array."""
    try:
        arr = np.asarray(seq)
    except ValueError:  # inhomogeneous shapes
        arr = np.empty(len(seq), dtype=object)
        for i, item in enumerate(seq):
            arr[i] = item
    if arr.dtype.kind in "US":
        arr = arr.astype(object)
    return arr


def _from_sequence(seq: list | tuple) -> Any:
    """Turn a list/tuple leaf into a stacked Batch, a stacked tensor or a numpy array."""
    if seq:
        first = seq[0]
        if isinstance(first, (Batch, Mapping)):
            return Batch.stack([x if isinstance(x, Batch) else Batch(x) for x in seq])
        if isinstance(first, torch.Tensor) and all(isinstance(x, torch.Tensor) for x in seq):
            return torch.stack(list(seq))
    return _to_array(seq)


def _convert(value: Any) -> Any:
    """Storage form of a value whose type is not in ``_KEEP`` (see the module docstring)."""
    if isinstance(value, (np.ndarray, torch.Tensor, Batch)):
        return value
    if isinstance(value, Mapping):
        return Batch(value)
    if isinstance(value, (list, tuple)):
        return _from_sequence(value)
    return value


def _check_same_keys(batches: Sequence[Batch], op: str, path: str) -> None:
    """Raise ValueError naming the first key that is not in every batch."""
    keys = batches[0].__dict__.keys()
    for i, b in enumerate(batches):
        other = b.__dict__.keys()
        if other != keys:
            missing = [k for k in keys if k not in other]
            if missing:
                raise ValueError(
                    f"Batch.{op}: key {path + missing[0]!r} is in batch 0 but not in batch {i}; "
                    "all batches need the same keys"
                )
            extra = next(k for k in other if k not in keys)
            raise ValueError(
                f"Batch.{op}: key {path + extra!r} is in batch {i} but not in batch 0; "
                "all batches need the same keys"
            )


def _sub_batches(values: list[Any], op: str, path: str) -> list[Batch]:
    """Check that a key holds a Batch in every input and that those Batches share their keys."""
    for i, v in enumerate(values):
        if not isinstance(v, Batch):
            raise ValueError(
                f"Batch.{op}: key {path[:-1]!r} is a Batch in batch 0 but a "
                f"{type(v).__name__} in batch {i}"
            )
    _check_same_keys(values, op, path)
    return values


def _cat(batches: list[Batch], path: str) -> Batch:
    out = _new_batch()
    od = out.__dict__
    for k, v0 in batches[0].__dict__.items():
        values = [b.__dict__[k] for b in batches]
        if isinstance(v0, Batch):
            od[k] = _cat(_sub_batches(values, "cat", f"{path}{k}."), f"{path}{k}.")
            continue
        if not isinstance(v0, _ARRAYS):
            raise ValueError(
                f"Batch.cat: key {path + k!r} holds a scalar ({v0!r}), which has no rows to "
                "concatenate; store it as an array or use Batch.stack"
            )
        try:
            od[k] = torch.cat(values) if isinstance(v0, torch.Tensor) else np.concatenate(values)
        except (TypeError, ValueError, RuntimeError) as e:
            e.add_note(f"while concatenating key {path + k!r}")
            raise
    return out


def _stack(batches: list[Batch], axis: int, path: str) -> Batch:
    out = _new_batch()
    od = out.__dict__
    for k, v0 in batches[0].__dict__.items():
        values = [b.__dict__[k] for b in batches]
        if isinstance(v0, Batch):
            od[k] = _stack(_sub_batches(values, "stack", f"{path}{k}."), axis, f"{path}{k}.")
            continue
        if not isinstance(v0, _ARRAYS) and axis not in (0, -1):
            raise ValueError(
                f"Batch.stack: key {path + k!r} holds scalars, which stack only along axis 0"
            )
        try:
            if isinstance(v0, torch.Tensor):
                od[k] = torch.stack(values, dim=axis)
            elif isinstance(v0, np.ndarray):
                arr = np.stack(values, axis=axis)
                od[k] = arr.astype(object) if arr.dtype.kind in "US" else arr
            else:
                od[k] = _to_array(values)
        except (TypeError, ValueError, RuntimeError) as e:
            e.add_note(f"while stacking key {path + k!r}")
            raise
    return out


def _setitem_leaf(target: Any, index: Any, value: Any, key: str) -> None:
    """``target[index] = value`` that also accepts numpy values for tensor targets."""
    try:
        target[index] = value
    except TypeError as e:
        if isinstance(target, torch.Tensor) and isinstance(value, np.ndarray):
            target[index] = torch.as_tensor(value, device=target.device)
            return
        e.add_note(f"while assigning into key {key!r}")
        raise
    except (ValueError, IndexError, RuntimeError) as e:
        e.add_note(f"while assigning into key {key!r}")
        raise


def _mixed_op(op: Callable[[Any, Any], Any], leaf: Any, other: Any, inplace: bool) -> Any:
    """``op(leaf, other)`` where one side may be a numpy array and the other a tensor: the array
    becomes a tensor on the tensor's device, except that an in-place op keeps a numpy leaf."""
    if isinstance(other, np.ndarray):
        if isinstance(leaf, torch.Tensor):
            other = torch.as_tensor(other, device=leaf.device)
    elif isinstance(other, torch.Tensor) and isinstance(leaf, np.ndarray):
        if inplace:
            other = other.detach().cpu().numpy()
        else:
            leaf = torch.as_tensor(leaf, device=other.device)
    return op(leaf, other)


def _rsub(a: Any, b: Any) -> Any:
    return b - a


def _rtruediv(a: Any, b: Any) -> Any:
    return b / a


def _radd(a: Any, b: Any) -> Any:
    return b + a


def _rmul(a: Any, b: Any) -> Any:
    return b * a


class Batch:
    """Nested dict of arrays that indexes, slices and does arithmetic on all leaves at once.

    Keys are strings, readable and writable both as ``b.key`` and ``b["key"]``; names that the
    class itself uses (``keys``, ``shape``, ``split``, dunders, ...) are refused. Any other index
    (int, slice, index array, bool mask, tuple) selects rows of every array/tensor leaf and returns
    a new Batch; basic slices give numpy/torch views, so in-place updates write through.

    ``in``, :meth:`keys`, :meth:`values`, :meth:`items`, :meth:`get`, :meth:`pop` and
    :meth:`update` work on keys like a dict, but iterating a Batch yields its rows ``b[0], b[1],
    ...`` like an array. ``bool(b)`` is ``not b.is_empty()``. There is no value equality: ``==``
    is identity.

    Batches built from others (indexing, arithmetic, :meth:`cat`, :meth:`to_torch`, ...) are plain
    ``Batch`` instances, whatever the class of the input. Subclasses that need private state should
    declare it in ``__slots__`` and set it with ``object.__setattr__``, because every entry of
    ``__dict__`` is a key.
    """

    # Lets numpy defer to Batch's reflected operators, so ``array + batch`` works leafwise.
    __array_ufunc__ = None
    # Names that cannot be keys because attribute access would find the class's member instead.
    _reserved: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._reserved = frozenset(dir(cls))

    def __init__(
        self,
        data: Mapping[str, Any] | Batch | Sequence[Mapping[str, Any] | Batch] | None = None,
        /,
        **kwargs: Any,
    ) -> None:
        """Build from a mapping, another Batch (shallow copy), a list of rows (stacked), and/or
        keyword arguments (which win over ``data`` on shared keys)."""
        d = self.__dict__
        if data is not None:
            if isinstance(data, Batch):
                if type(self) is not Batch and not self._reserved.isdisjoint(data.__dict__):
                    self._check_key(next(k for k in data.__dict__ if k in self._reserved))
                d.update(data.__dict__)
            elif isinstance(data, Mapping):
                for k, v in data.items():
                    self._check_key(k)
                    d[k] = v if type(v) in _KEEP else _convert(v)
            elif isinstance(data, (list, tuple)):
                if data:
                    d.update(Batch.stack(data).__dict__)
            else:
                raise TypeError(
                    f"Batch() takes a mapping, a Batch or a list of them, not {type(data).__name__}"
                )
        if kwargs:
            if not self._reserved.isdisjoint(kwargs):
                self._check_key(next(k for k in kwargs if k in self._reserved))
            for k, v in kwargs.items():
                d[k] = v if type(v) in _KEEP else _convert(v)

    def _check_key(self, key: Any) -> None:
        if not isinstance(key, str):
            raise TypeError(f"Batch keys must be str, got {key!r} ({type(key).__name__})")
        if key in self._reserved:
            raise ValueError(
                f"{key!r} cannot be a Batch key: it names a member of {type(self).__name__} "
                "and would hide it; pick another name"
            )

    # --- dict-like access -------------------------------------------------------------------

    def __setattr__(self, key: str, value: Any) -> None:
        if key in self._reserved:
            self._check_key(key)
        self.__dict__[key] = value if type(value) in _KEEP else _convert(value)

    def __getitem__(self, index: Any) -> Any:
        """``b["key"]`` returns a value; any other index returns a Batch of the selected rows."""
        if type(index) is str:
            return self.__dict__[index]
        if isinstance(index, str):
            return self.__dict__[str(index)]
        out = _new_batch()
        od = out.__dict__
        for k, v in self.__dict__.items():
            if isinstance(v, _INDEXABLE):
                try:
                    od[k] = v[index]
                except (IndexError, TypeError, ValueError, RuntimeError) as e:
                    if getattr(v, "ndim", None) == 0:  # 0-d arrays have no rows: keep, like scalars
                        od[k] = v
                        continue
                    e.add_note(f"while indexing key {k!r}")
                    raise
            else:
                od[k] = v
        return out

    def __setitem__(self, index: Any, value: Any) -> None:
        """``b["key"] = v`` stores a (converted) value. ``b[rows] = v`` writes ``v`` into those rows
        of every array/tensor leaf: a Batch or dict writes key by key (keys it lacks stay
        untouched), anything else is broadcast to every leaf. Scalar leaves are left alone."""
        if isinstance(index, str):
            self._check_key(index)
            self.__dict__[str(index)] = value if type(value) in _KEEP else _convert(value)
            return
        d = self.__dict__
        if isinstance(value, Mapping):
            value = Batch(value)
        if isinstance(value, Batch):
            for k, v in value.__dict__.items():
                target = d.get(k, _MISSING)
                if target is _MISSING:
                    raise ValueError(
                        f"cannot write key {k!r} into rows of a Batch that has no {k!r}; "
                        f"create the whole leaf first (b[{k!r}] = ...)"
                    )
                if isinstance(target, Batch) or (
                    isinstance(target, _ARRAYS) and not isinstance(v, Batch)
                ):
                    _setitem_leaf(target, index, v, k)
                elif isinstance(target, _ARRAYS):
                    raise TypeError(f"cannot write a Batch into array leaf {k!r}")
        else:
            for k, target in d.items():
                if isinstance(target, _INDEXABLE):
                    _setitem_leaf(target, index, value, k)

    def __delitem__(self, key: str) -> None:
        del self.__dict__[key]

    def __contains__(self, key: object) -> bool:
        return key in self.__dict__

    def keys(self) -> KeysView[str]:
        """The keys, in insertion order."""
        return self.__dict__.keys()

    def values(self) -> ValuesView[Any]:
        """The values, in key order."""
        return self.__dict__.values()

    def items(self) -> ItemsView[str, Any]:
        """``(key, value)`` pairs, in key order."""
        return self.__dict__.items()

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when absent."""
        return self.__dict__.get(key, default)

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        """Remove ``key`` and return its value; ``default`` if given and absent, else KeyError."""
        if default is _MISSING:
            return self.__dict__.pop(key)
        return self.__dict__.pop(key, default)

    def update(self, other: Mapping[str, Any] | Batch | None = None, /, **kwargs: Any) -> None:
        """Set keys from ``other`` and ``kwargs``, converting values as on construction. Like
        ``dict.update`` this replaces values; nested Batches are not merged."""
        src = Batch(other, **kwargs).__dict__
        if not self._reserved.isdisjoint(src):  # a subclass may reserve more names than Batch
            self._check_key(next(k for k in src if k in self._reserved))
        self.__dict__.update(src)

    # --- array-like -------------------------------------------------------------------------

    def _len(self) -> int | None:
        """Rows shared by the array leaves; None when there are no array leaves."""
        n = None
        first = ""
        for k, v in self.__dict__.items():
            if isinstance(v, _ARRAYS):
                if v.ndim == 0:
                    continue
                m = v.shape[0]
            elif isinstance(v, Batch):
                m = v._len()
                if m is None:
                    continue
            else:
                continue
            if n is None:
                n, first = m, k
            elif m != n:
                raise ValueError(
                    f"Batch leaves disagree on their number of rows: {first!r} has {n}, "
                    f"{k!r} has {m}"
                )
        return n

    def __len__(self) -> int:
        """Size of the first dimension, shared by every array/tensor leaf (nested ones included).

        0 for an empty Batch; TypeError when there are keys but no array leaves (only scalars);
        ValueError when array leaves disagree."""
        n = self._len()
        if n is None:
            if self.is_empty():
                return 0
            raise TypeError(
                f"{type(self).__name__} has no length: keys {list(self.__dict__)} hold no "
                "array or tensor with at least one dimension"
            )
        return n

    def __iter__(self) -> Iterator[Batch]:
        """Iterate over rows ``b[0], b[1], ...`` (use :meth:`keys` for keys)."""
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        return not self.is_empty()

    def _shape(self) -> tuple[int, ...] | None:
        common: tuple[int, ...] | None = None
        for v in self.__dict__.values():
            if isinstance(v, _ARRAYS):
                if v.ndim == 0:
                    continue
                s = tuple(v.shape)
            elif isinstance(v, Batch):
                s = v._shape()
                if s is None:
                    continue
            else:
                continue
            if common is None:
                common = s
            else:
                n = 0
                for a, b in zip(common, s):
                    if a != b:
                        break
                    n += 1
                common = common[:n]
        return common

    @property
    def shape(self) -> tuple[int, ...]:
        """Longest shape prefix common to all array/tensor leaves; ``()`` when there are none."""
        s = self._shape()
        return () if s is None else s

    def is_empty(self) -> bool:
        """True when the Batch holds no data: no keys, or only (recursively) empty Batches."""
        for v in self.__dict__.values():
            if not isinstance(v, Batch) or not v.is_empty():
                return False
        return True

    @staticmethod
    def cat(batches: Sequence[Batch | Mapping[str, Any]]) -> Batch:
        """Concatenate along the first axis. Empty batches are skipped; the rest need the same
        keys (recursively), else ValueError naming the key. Scalar leaves cannot be concatenated
        (ValueError). Returns ``Batch()`` when nothing is left."""
        bs = [b if isinstance(b, Batch) else Batch(b) for b in batches]
        bs = [b for b in bs if not b.is_empty()]
        if not bs:
            return Batch()
        _check_same_keys(bs, "cat", "")
        return _cat(bs, "")

    @staticmethod
    def stack(batches: Sequence[Batch | Mapping[str, Any]], axis: int = 0) -> Batch:
        """Stack along a new ``axis``: arrays with ``np.stack``, tensors with ``torch.stack``,
        scalars into a 1-d array (axis 0 only). All batches need the same keys (recursively),
        else ValueError naming the key. Returns ``Batch()`` for an empty list."""
        bs = [b if isinstance(b, Batch) else Batch(b) for b in batches]
        if not bs:
            return Batch()
        _check_same_keys(bs, "stack", "")
        return _stack(bs, axis, "")

    def split(
        self,
        size: int,
        shuffle: bool = False,
        merge_last: bool = False,
        rng: np.random.Generator | None = None,
    ) -> Iterator[Batch]:
        """Yield consecutive sub-batches of ``size`` rows; the last one may be shorter.

        ``merge_last`` folds a short last chunk into the one before it (so no chunk is shorter
        than ``size`` unless the whole batch is). ``shuffle`` permutes the rows first, with
        ``rng`` or numpy's global generator. Unshuffled chunks are views (slices)."""
        if size < 1:
            raise ValueError(f"split size must be at least 1, got {size}")
        n = len(self)
        starts = list(range(0, n, size))
        if merge_last and len(starts) > 1 and n - starts[-1] < size:
            starts.pop()
        ends = [*starts[1:], n]
        if shuffle:
            perm = rng.permutation(n) if rng is not None else np.random.permutation(n)
            for s, e in zip(starts, ends):
                yield self[perm[s:e]]
        else:
            for s, e in zip(starts, ends):
                yield self[s:e]

    # --- conversion -------------------------------------------------------------------------

    def to_numpy(self) -> Batch:
        """A new Batch with every tensor as a numpy array (detached, moved to CPU; CPU tensors
        share memory with the result). Other leaves are kept."""
        out = _new_batch()
        od = out.__dict__
        for k, v in self.__dict__.items():
            if isinstance(v, torch.Tensor):
                v = v.detach().cpu()
                od[k] = v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
            elif isinstance(v, Batch):
                od[k] = v.to_numpy()
            else:
                od[k] = v
        return out

    def to_torch(
        self, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
    ) -> Batch:
        """A new Batch with every numeric/bool numpy array as a tensor on ``device``, and every
        tensor moved there. ``dtype``, when given, applies to all of them. Object/text arrays and
        scalars are kept. On CPU with no dtype change the tensors share memory with the arrays."""
        out = _new_batch()
        od = out.__dict__
        for k, v in self.__dict__.items():
            if isinstance(v, np.ndarray):
                if v.dtype.kind in "biufc":
                    try:
                        od[k] = torch.as_tensor(v, dtype=dtype, device=device)
                    except ValueError:  # negative strides
                        od[k] = torch.as_tensor(np.ascontiguousarray(v), dtype=dtype, device=device)
                else:
                    od[k] = v
            elif isinstance(v, torch.Tensor):
                od[k] = v.to(device=device, dtype=dtype) if dtype is not None else v.to(device)
            elif isinstance(v, Batch):
                od[k] = v.to_torch(dtype, device)
            else:
                od[k] = v
        return out

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dicts with the same leaf objects."""
        return {k: v.to_dict() if isinstance(v, Batch) else v for k, v in self.__dict__.items()}

    # --- arithmetic -------------------------------------------------------------------------

    def _binary(self, other: Any, op: Callable[[Any, Any], Any], inplace: bool) -> Batch:
        """Apply ``op(leaf, other)`` to every numeric leaf; with a Batch/dict, key by key.

        Text, ``None`` and other non-numeric leaves are carried over unchanged."""
        out = self if inplace else _new_batch()
        od = out.__dict__
        if isinstance(other, Mapping):
            other = Batch(other)
        src = None
        if isinstance(other, Batch):
            _check_same_keys([self, other], "arithmetic", "")
            src = other.__dict__
        # numpy and torch do not mix in binary operators; only then is coercion needed
        may_mix = src is not None or isinstance(other, _ARRAYS)
        for k, v in self.__dict__.items():
            if isinstance(v, _OPERANDS):
                o = other if src is None else src[k]
                try:
                    od[k] = _mixed_op(op, v, o, inplace) if may_mix else op(v, o)
                except Exception as e:
                    e.add_note(f"in Batch arithmetic on key {k!r}")
                    raise
            elif not inplace:
                od[k] = v
        return out

    def __add__(self, other: Any) -> Batch:
        return self._binary(other, operator.add, False)

    def __sub__(self, other: Any) -> Batch:
        return self._binary(other, operator.sub, False)

    def __mul__(self, other: Any) -> Batch:
        return self._binary(other, operator.mul, False)

    def __truediv__(self, other: Any) -> Batch:
        return self._binary(other, operator.truediv, False)

    def __radd__(self, other: Any) -> Batch:
        return self._binary(other, _radd, False)

    def __rsub__(self, other: Any) -> Batch:
        return self._binary(other, _rsub, False)

    def __rmul__(self, other: Any) -> Batch:
        return self._binary(other, _rmul, False)

    def __rtruediv__(self, other: Any) -> Batch:
        return self._binary(other, _rtruediv, False)

    def __iadd__(self, other: Any) -> Batch:
        return self._binary(other, operator.iadd, True)

    def __isub__(self, other: Any) -> Batch:
        return self._binary(other, operator.isub, True)

    def __imul__(self, other: Any) -> Batch:
        return self._binary(other, operator.imul, True)

    def __itruediv__(self, other: Any) -> Batch:
        return self._binary(other, operator.itruediv, True)

    # --- display ----------------------------------------------------------------------------

    def __repr__(self) -> str:
        name = type(self).__name__
        if not self.__dict__:
            return f"{name}()"
        lines = [f"{name}("]
        for k, v in self.__dict__.items():
            # continuation lines of a leaf line up under the character after "key: "
            text = repr(v).replace("\n", "\n" + " " * (len(k) + 6))
            lines.append(f"    {k}: {text},")
        lines.append(")")
        return "\n".join(lines)

    __str__ = __repr__


Batch._reserved = frozenset(dir(Batch))

# Types stored as they are, found with one set lookup on construction and assignment.
_KEEP = frozenset(
    {
        np.ndarray,
        torch.Tensor,
        Batch,
        int,
        float,
        bool,
        complex,
        str,
        bytes,
        type(None),
        np.float64,
        np.float32,
        np.int64,
        np.int32,
        np.bool_,
    }
)
_INDEXABLE = (np.ndarray, torch.Tensor, Batch)
_OPERANDS = (np.ndarray, torch.Tensor, Batch, int, float, complex, np.number, np.bool_)
