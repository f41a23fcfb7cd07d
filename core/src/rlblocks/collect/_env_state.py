"""Snapshots of a running gymnasium env, so that a resumed run continues its episodes.

:func:`snapshot` walks an env's wrapper chain and returns the state of every layer as plain
values (numbers, strings, numpy arrays, the env's random generator state): enough to put a freshly
made env of the same id in exactly the same place, so that the next ``step`` returns bit for bit
what the original env would have returned. :func:`restore` puts it back. Nothing in a snapshot is
code, and restoring calls nothing named by it.

An env can be snapshotted when every layer is one of the known kinds:

* any layer that implements the protocol ``snapshot_state() -> dict`` and
  ``restore_state(state: dict) -> None`` (your own envs and wrappers: return plain values).
  A layer that cannot be snapshotted right now (a part of it holds state that is not plain
  values) returns the refusal ``{"why": reason}`` (that one key, a non-empty reason) instead:
  :func:`snapshot` then returns None and :func:`snapshot_or_reason` names the layer and its
  reason;
* gymnasium's bookkeeping and stateless wrappers (TimeLimit, OrderEnforcing, PassiveEnvChecker,
  ClipAction, RescaleAction, FlattenObservation, ...) and the running statistics of
  NormalizeObservation / NormalizeReward;
* gymnasium's classic-control and toy-text envs, and its MuJoCo envs (the whole simulator state:
  ``mj_getState`` plus every fixed-size array of ``MjData``, which some envs read between steps);
* Atari: ale-py's ``AtariEnv`` (the emulator state with its random generator) and gymnasium's
  ``AtariPreprocessing`` (its max-pool frames and life count).

Any other layer (Box2D, an unknown wrapper) makes :func:`snapshot` return None and
:func:`why_not` name the layer: a resumed run then restarts that env's episode instead (and
warns with the reason). :func:`why_not` looks at the layers' kinds only; a protocol layer's
refusal is known once :func:`snapshot_or_reason` asks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

__all__ = ["can_snapshot", "restore", "snapshot", "snapshot_or_reason", "why_not"]

#: random generators a snapshot may name (numpy's own bit generators)
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")

#: attributes that are an env layer's whole state, by class (module, qualname); [] = stateless
_ATTRS: dict[tuple[str, str], tuple[str, ...]] = {}


def _known(module: str, names: dict[str, tuple[str, ...]]) -> None:
    for name, attrs in names.items():
        _ATTRS[(module, name)] = attrs


_known("gymnasium.wrappers.common", {
    "TimeLimit": ("_elapsed_steps",),
    "OrderEnforcing": ("_has_reset",),
    "PassiveEnvChecker": ("checked_reset", "checked_step", "checked_render", "close_called",
                          "checked_data_reuse"),
    "Autoreset": ("autoreset",),
})  # fmt: skip
_known("gymnasium.wrappers.transform_action", {
    "ClipAction": (), "RescaleAction": (), "TransformAction": (),
})  # fmt: skip
_known("gymnasium.wrappers.transform_observation", {
    "FlattenObservation": (), "DtypeObservation": (), "RescaleObservation": (),
    "ReshapeObservation": (), "FilterObservation": (), "TransformObservation": (),
})  # fmt: skip
_known("gymnasium.wrappers.transform_reward", {"ClipReward": (), "TransformReward": ()})
_known("gymnasium.wrappers.atari_preprocessing", {
    "AtariPreprocessing": ("obs_buffer", "lives", "game_over"),
})  # fmt: skip
_known("gymnasium.envs.classic_control.cartpole", {
    "CartPoleEnv": ("state", "steps_beyond_terminated"),
})  # fmt: skip
_known("gymnasium.envs.classic_control.pendulum", {"PendulumEnv": ("state", "last_u")})
_known("gymnasium.envs.classic_control.mountain_car", {"MountainCarEnv": ("state",)})
_known("gymnasium.envs.classic_control.continuous_mountain_car", {
    "Continuous_MountainCarEnv": ("state",),
})  # fmt: skip
_known("gymnasium.envs.classic_control.acrobot", {"AcrobotEnv": ("state",)})
_known("gymnasium.envs.toy_text.frozen_lake", {"FrozenLakeEnv": ("s", "lastaction")})
_known("gymnasium.envs.toy_text.cliffwalking", {"CliffWalkingEnv": ("s", "lastaction")})
_known("gymnasium.envs.toy_text.taxi", {
    "TaxiEnv": ("s", "lastaction", "taxi_orientation"),
})  # fmt: skip
_known("gymnasium.envs.toy_text.blackjack", {"BlackjackEnv": ("dealer", "player")})


def _key(obj: object) -> tuple[str, str]:
    cls = type(obj)
    return cls.__module__, cls.__qualname__


def _layers(env: gym.Env) -> list[Any]:
    layers = [env]
    while isinstance(layers[-1], gym.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _is_gymnasium_mujoco(layer: Any) -> bool:
    try:
        from gymnasium.envs.mujoco.mujoco_env import MujocoEnv
    except Exception:  # mujoco not installed
        return False
    return isinstance(layer, MujocoEnv) and type(layer).__module__.startswith(
        "gymnasium.envs.mujoco."
    )


def _how(layer: Any) -> str:
    """How a layer is snapshotted: 'protocol', 'attrs', 'mujoco' or '' (it cannot be)."""
    if callable(getattr(type(layer), "snapshot_state", None)) and callable(
        getattr(type(layer), "restore_state", None)
    ):
        return "protocol"
    if _key(layer) in _ATTRS:
        return "attrs"
    if _key(layer) in _RUNNING:
        return "running"
    if _is_gymnasium_mujoco(layer):
        return "mujoco"
    return ""


def why_not(env: gym.Env) -> str:
    """Empty when ``env`` can be snapshotted; else which layer cannot be and what to do."""
    for layer in _layers(env):
        if not _how(layer):
            return (
                f"{type(layer).__module__}.{type(layer).__qualname__} keeps state rlblocks "
                "cannot snapshot (give it snapshot_state() and restore_state(state) methods "
                "that return and take plain values)"
            )
    return ""


def _refusal(layer: Any, state: Any) -> str:
    """The reason of a protocol layer's refusal ``{"why": reason}``; "" for a snapshot."""
    if isinstance(state, Mapping) and set(state) == {"why"} and state["why"]:
        return f"{type(layer).__module__}.{type(layer).__qualname__}: {state['why']}"
    return ""


def can_snapshot(env: gym.Env) -> bool:
    """Whether :func:`snapshot` will return a snapshot of ``env``."""
    return not why_not(env)


# -- plain values ---------------------------------------------------------------------------
def _copy_value(value: Any) -> Any:
    """A detached copy of an attribute value made of numbers, strings, arrays and containers."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item() if value.dtype.kind in "biufc" else value
    if isinstance(value, list | tuple):
        return type(value)(_copy_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _copy_value(v) for k, v in value.items()}
    return value


def _restore_value(saved: Any, current: Any) -> Any:
    """The saved value in the form the attribute had (a numpy scalar stays one)."""
    if isinstance(current, np.generic) and not isinstance(saved, np.ndarray):
        return type(current)(saved)
    return _copy_value(saved)


def _rng_state(layer: Any) -> dict[str, Any] | None:
    rng = getattr(layer, "_np_random", None)
    if not isinstance(rng, np.random.Generator):
        return None
    return {"state": rng.bit_generator.state, "seed": getattr(layer, "_np_random_seed", None)}


def _set_rng_state(layer: Any, saved: Mapping[str, Any] | None) -> None:
    if saved is None:
        return
    state = dict(saved["state"])
    name = state.get("bit_generator")
    if name not in _BIT_GENERATORS:
        raise ValueError(f"unknown random generator {name!r} in an env snapshot")
    rng = np.random.Generator(getattr(np.random, name)())
    rng.bit_generator.state = state
    layer._np_random = rng
    if saved.get("seed") is not None:
        layer._np_random_seed = int(saved["seed"])


# -- running statistics of gymnasium's normalising wrappers ---------------------------------
def _rms_get(layer: Any, attr: str) -> dict[str, Any]:
    rms = getattr(layer, attr)
    return {"mean": np.array(rms.mean, copy=True), "var": np.array(rms.var, copy=True),
            "count": float(rms.count)}  # fmt: skip


def _rms_set(layer: Any, attr: str, saved: Mapping[str, Any]) -> None:
    rms = getattr(layer, attr)
    rms.mean, rms.var, rms.count = np.array(saved["mean"]), np.array(saved["var"]), saved["count"]


_RUNNING: dict[tuple[str, str], tuple[Callable[[Any], dict], Callable[[Any, Mapping], None]]] = {
    ("gymnasium.wrappers.stateful_observation", "NormalizeObservation"): (
        lambda w: {"rms": _rms_get(w, "obs_rms"), "update": bool(w._update_running_mean)},
        lambda w, s: (_rms_set(w, "obs_rms", s["rms"]),
                      setattr(w, "_update_running_mean", bool(s["update"]))),
    ),
    ("gymnasium.wrappers.stateful_reward", "NormalizeReward"): (
        lambda w: {"rms": _rms_get(w, "return_rms"), "update": bool(w._update_running_mean),
                   "discounted": np.array(w.discounted_reward, copy=True)},
        lambda w, s: (_rms_set(w, "return_rms", s["rms"]),
                      setattr(w, "_update_running_mean", bool(s["update"])),
                      setattr(w, "discounted_reward", np.array(s["discounted"]))),
    ),
    ("ale_py.env", "AtariEnv"): (lambda e: _ale_get(e), lambda e, s: _ale_set(e, s)),
}  # fmt: skip


# -- the Arcade Learning Environment ---------------------------------------------------------
def _ale_get(env: Any) -> dict[str, Any]:
    """The emulator's whole state with its random generator (sticky actions draw from it), as
    the bytes ALE serialises it to."""
    raw = env.ale.cloneState(include_rng=True).serialize()
    return {"ale": np.frombuffer(raw, dtype=np.uint8).copy()}


def _ale_set(env: Any, saved: Mapping[str, Any]) -> None:
    import ale_py

    raw = np.ascontiguousarray(saved["ale"], dtype=np.uint8).tobytes()
    env.ale.restoreState(ale_py.ALEState(raw))


# -- MuJoCo ----------------------------------------------------------------------------------
def _mujoco_arrays(data: Any) -> dict[str, np.ndarray]:
    """Every fixed-size numeric array of an MjData (positions, velocities, and the derived
    quantities a step leaves behind, which some envs read before the next step)."""
    out = {}
    for name in dir(data):
        if name.startswith("_") or name.startswith("efc_") or name in {"contact"}:
            continue
        try:
            value = getattr(data, name)
        except Exception:
            continue
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            out[name] = value
    return out


def _mujoco_get(layer: Any) -> dict[str, Any]:
    import mujoco

    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state = np.empty(mujoco.mj_stateSize(layer.model, spec), dtype=np.float64)
    mujoco.mj_getState(layer.model, layer.data, state, spec)
    arrays = {k: v.copy() for k, v in _mujoco_arrays(layer.data).items()}
    return {"integration": state, "arrays": arrays}


def _mujoco_set(layer: Any, saved: Mapping[str, Any]) -> None:
    import mujoco

    spec = int(mujoco.mjtState.mjSTATE_INTEGRATION)
    state = np.ascontiguousarray(saved["integration"], dtype=np.float64)
    if state.shape != (mujoco.mj_stateSize(layer.model, spec),):
        raise ValueError("the MuJoCo state in the snapshot does not fit this env's model")
    mujoco.mj_setState(layer.model, layer.data, state, spec)
    mujoco.mj_forward(layer.model, layer.data)
    current = _mujoco_arrays(layer.data)
    for name, value in saved["arrays"].items():
        target = current.get(name)
        if target is not None and target.shape == np.shape(value):
            target[...] = value


# -- snapshot / restore ----------------------------------------------------------------------
def snapshot(env: gym.Env) -> dict[str, Any] | None:
    """The state of every layer of ``env`` (outermost first) as plain values, or None when a
    layer cannot be snapshotted (see :func:`why_not` and :func:`snapshot_or_reason`)."""
    return _snapshot(env)[0]


def _snapshot(env: gym.Env) -> tuple[dict[str, Any] | None, str]:
    """``(snapshot, "")``, or ``(None, why)`` naming the first layer that cannot be
    snapshotted (its kind is unknown, or it refused)."""
    layers = []
    for layer in _layers(env):
        how = _how(layer)
        if not how:
            return None, why_not(env)
        entry: dict[str, Any] = {"class": ".".join(_key(layer)), "how": how}
        if how == "protocol":
            entry["state"] = layer.snapshot_state()
            refused = _refusal(layer, entry["state"])
            if refused:
                return None, refused
        elif how == "attrs":
            entry["state"] = {a: _copy_value(getattr(layer, a, None)) for a in _ATTRS[_key(layer)]}
        elif how == "running":
            entry["state"] = _RUNNING[_key(layer)][0](layer)
        else:
            entry["state"] = _mujoco_get(layer)
        if not isinstance(layer, gym.Wrapper):
            entry["rng"] = _rng_state(layer)
        layers.append(entry)
    return {"format": 1, "layers": layers}, ""


def restore(env: gym.Env, state: Mapping[str, Any]) -> None:
    """Put ``env`` (made the same way as the snapshotted one) where :func:`snapshot` found its
    twin. Raises ValueError when the snapshot does not fit this env's layers."""
    layers = _layers(env)
    saved = list(state.get("layers", ()))
    names = [".".join(_key(layer)) for layer in layers]
    if [s.get("class") for s in saved] != names:
        raise ValueError(
            f"the env snapshot has layers {[s.get('class') for s in saved]}, this env {names}"
        )
    for layer, entry in zip(layers, saved):
        how, value = entry["how"], entry["state"]
        if how != _how(layer):
            raise ValueError(f"{entry['class']} was snapshotted as {how!r}, not {_how(layer)!r}")
        if how == "protocol":
            layer.restore_state(value)
        elif how == "attrs":
            for attr in _ATTRS[_key(layer)]:
                if attr in value:
                    setattr(layer, attr, _restore_value(value[attr], getattr(layer, attr, None)))
            if _key(layer) == ("gymnasium.wrappers.common", "PassiveEnvChecker"):
                _continue_reuse_check(layer)
        elif how == "running":
            _RUNNING[_key(layer)][1](layer, value)
        else:
            _mujoco_set(layer, value)
        if "rng" in entry:
            _set_rng_state(layer, entry["rng"])


def _continue_reuse_check(checker: Any) -> None:
    """gymnasium's PassiveEnvChecker compares the objects of its first reset and first steps to
    warn about an env that reuses its observation buffers, and keeps the last ones for that
    (``_previous_data``, not state: object identity cannot cross a restore). A checker restored
    between its first reset and its second step would compare against nothing and fail with a
    TypeError at the next step, so it gets an empty record: the API checks of the first step
    still run, and no object is shared with one made before the restore."""
    if getattr(checker, "_previous_data", False) is None and not getattr(
        checker, "checked_data_reuse", True
    ):
        checker._previous_data = (None, {})


def snapshot_or_reason(env: gym.Env) -> dict[str, Any]:
    """``{"env": snapshot or None, "why": why not}``: what a vector env's ``snapshot`` reports
    for one env (``why`` names the layer that is unknown or refused, "" with a snapshot)."""
    snap, why = _snapshot(env)
    return {"env": snap, "why": why}
