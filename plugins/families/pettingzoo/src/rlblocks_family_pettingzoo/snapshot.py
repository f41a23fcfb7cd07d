"""Snapshots of a PettingZoo env's state as plain values, so a resumed run continues episodes.

PettingZoo envs have no snapshot protocol, but pure-Python ones (MPE, the classic games) keep
their whole state in plain attributes: numbers, strings, numpy arrays, random generators, and
objects and containers of those. :func:`snapshot_object` walks that object graph and records it
as plain values (tagged dicts, lists, arrays; shared objects recorded once and referred to by
number); :func:`restore_object` walks the same graph of a freshly made twin and writes the values
back in place. Nothing in a snapshot is code, and restoring creates no object from a name it
reads (only numpy's own bit generators): an object the snapshot holds must already exist in the
twin. Code (functions, classes, modules), spaces and drawing canvases (pygame) are skipped;
anything else that is not plain (a native handle) makes :func:`snapshot_object` raise
:class:`NotSnapshottable` naming it, and the env's episodes then restart on resume.
"""

from __future__ import annotations

import types
from typing import Any

import gymnasium as gym
import numpy as np

_BIT_GENERATORS = {
    "PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM, "MT19937": np.random.MT19937,
    "Philox": np.random.Philox, "SFC64": np.random.SFC64,
}  # fmt: skip
_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_STATIC = (
    types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
    gym.Space,
)  # fmt: skip


#: packages whose objects only draw the env (MPE keeps a pygame canvas even without rendering)
_RENDERING = ("pygame",)


class NotSnapshottable(TypeError):
    """A part of the env holds state that is not plain values."""


def snapshot_object(obj: Any) -> Any:
    """``obj``'s state as plain values (see the module docstring)."""
    return _snap(obj, {}, "env")


def _snap(obj: Any, memo: dict[int, int], where: str) -> Any:
    if isinstance(obj, _SCALARS):
        return obj
    if isinstance(obj, np.generic):
        return {"np0": np.asarray(obj)}
    if isinstance(obj, _STATIC) or (callable(obj) and not hasattr(obj, "__dict__")):
        return {"skip": 0}
    if type(obj).__module__.split(".")[0] in _RENDERING:
        return {"skip": 0}  # a window or canvas: made again when the env renders
    key = id(obj)
    if key in memo:
        return {"ref": memo[key]}
    memo[key] = n = len(memo)
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biufc":
            raise NotSnapshottable(f"{where} is a numpy array of dtype {obj.dtype}")
        return {"arr": obj.copy(), "n": n}
    if isinstance(obj, np.random.Generator):
        return {"rng": obj.bit_generator.state, "n": n}
    if isinstance(obj, np.random.RandomState):
        return {"rs": obj.get_state(legacy=False), "n": n}
    if isinstance(obj, list | tuple):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_snap(v, memo, f"{where}[{i}]") for i, v in enumerate(obj)], "n": n}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str | int):
                raise NotSnapshottable(f"{where} has the key {k!r}, neither a string nor an int")
        return {"dict": [[k, _snap(v, memo, f"{where}[{k!r}]")] for k, v in obj.items()], "n": n}
    attrs = getattr(obj, "__dict__", None)
    if attrs is None:
        raise NotSnapshottable(
            f"{where} is a {type(obj).__module__}.{type(obj).__qualname__}, whose state is "
            "not plain Python values"
        )
    return {
        "obj": f"{type(obj).__module__}.{type(obj).__qualname__}",
        "attrs": [[a, _snap(v, memo, f"{where}.{a}")] for a, v in attrs.items()],
        "n": n,
    }


def restore_object(target: Any, state: Any) -> Any:
    """Write ``state`` (from :func:`snapshot_object` of ``target``'s twin) into ``target`` in
    place; returns the restored value (``target`` itself for objects and containers that fit).
    Raises ValueError when the snapshot does not fit ``target``."""
    return _restore(target, state, {}, "env")


def _restore(target: Any, state: Any, table: dict[int, Any], where: str) -> Any:
    if not isinstance(state, dict):
        return state
    if "skip" in state:
        return target
    if "np0" in state:
        return np.asarray(state["np0"])[()]
    if "ref" in state:
        n = int(state["ref"])
        if n not in table:
            raise ValueError(f"{where}: the snapshot refers to an object it does not hold")
        return table[n]
    n = int(state["n"])
    if "arr" in state:
        arr = np.asarray(state["arr"])
        if (
            isinstance(target, np.ndarray)
            and target.shape == arr.shape
            and target.dtype == arr.dtype
            and target.flags.writeable
        ):
            target[...] = arr
            out: Any = target
        else:
            out = arr.copy()
    elif "rng" in state:
        rng = dict(state["rng"])
        bit = _BIT_GENERATORS.get(str(rng.get("bit_generator")))
        if bit is None:
            raise ValueError(f"{where}: unknown random generator {rng.get('bit_generator')!r}")
        out = target if isinstance(target, np.random.Generator) else np.random.Generator(bit())
        out.bit_generator.state = rng
    elif "rs" in state:
        out = target if isinstance(target, np.random.RandomState) else np.random.RandomState()
        out.set_state(state["rs"])
    elif "list" in state or "tuple" in state:
        items = state.get("list", state.get("tuple"))
        old = target if isinstance(target, list | tuple) else []
        if isinstance(target, list) and "list" in state:
            out = target
            table[n] = out  # before its items: they may refer back to it
            new = [
                _restore(old[i] if i < len(old) else None, v, table, f"{where}[{i}]")
                for i, v in enumerate(items)
            ]
            out[:] = new
            return out
        new = [
            _restore(old[i] if i < len(old) else None, v, table, f"{where}[{i}]")
            for i, v in enumerate(items)
        ]
        out = new if "list" in state else tuple(new)
    elif "dict" in state:
        out = target if isinstance(target, dict) else {}
        table[n] = out
        pairs = state["dict"]
        keep = {k for k, _ in pairs}
        for k in [k for k in out if k not in keep]:
            del out[k]
        for k, v in pairs:
            out[k] = _restore(out.get(k), v, table, f"{where}[{k!r}]")
        return out
    elif "obj" in state:
        name = f"{type(target).__module__}.{type(target).__qualname__}"
        if target is None or name != state["obj"]:
            raise ValueError(
                f"{where}: the snapshot holds a {state['obj']}, the env here "
                f"{'nothing' if target is None else 'a ' + name}; make the env the same way"
            )
        table[n] = target
        attrs = target.__dict__
        for a, v in state["attrs"]:
            attrs[a] = _restore(attrs.get(a), v, table, f"{where}.{a}")
        return target
    else:
        raise ValueError(f"{where}: not a snapshot entry ({sorted(state)})")
    table[n] = out
    return out
