"""The env actor: a plain class that Ray runs in a worker process, owning a few envs.

Every method answers ``("ok", payload)`` or, when an env raises, ``("err", env_id, command,
repr(exc), traceback)``: the error is a value, so the caller learns which env failed and the
actor keeps serving. Only the death of the process itself surfaces as a Ray error. ``slots``
index the actor's own envs (None: all of them, the hot path). Ray is not imported here: the
vector env wraps this class with ``ray.remote``.

Box observations are stacked here into one array per call; one whose shape is not the one its
space says is reported like an env error, but in one line and without a traceback (an empty
one): the env, not rlblocks, is at fault. Dict/Tuple/Text observations travel as they are, one
per env: the vector env stacks them and names a misshapen leaf when that fails.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np

from rlblocks.collect import env_state as env_state
from rlblocks.collect import observation_mismatch, step_value_problem

Reply = tuple[Any, ...]


class ObservationMismatch(ValueError):
    """An env returned a Box observation of another shape than its space says, or a reward or
    flag of the wrong type (one line)."""


class EnvActor:
    """Owns the envs ``env_ids`` built from ``fns_payload`` (cloudpickled factories)."""

    def __init__(self, fns_payload: bytes, env_ids: list[int]) -> None:
        self._payload = fns_payload
        self.env_ids = env_ids
        self.envs: list[gym.Env] = []
        self._box_obs = False
        self._obs_shape: tuple[int, ...] = ()
        self._int_actions = False
        #: slots whose step() results are not checked yet (step_value_problem)
        self._unchecked: set[int] = set()

    def make(self) -> Reply:
        """Build the envs; answers their spaces, spec, metadata, render mode and this pid."""
        current = self.env_ids[0]
        try:
            fns: list[Callable[[], gym.Env]] = cloudpickle.loads(self._payload)
            for gid, fn in zip(self.env_ids, fns):
                current = gid
                self.envs.append(fn())
            first = self.envs[0]
            self._box_obs = isinstance(first.observation_space, gym.spaces.Box)
            if self._box_obs:
                self._obs_shape = tuple(first.observation_space.shape)
            self._int_actions = isinstance(first.action_space, gym.spaces.Discrete)
            self._unchecked = set(range(len(self.envs)))
            spaces = [(e.observation_space, e.action_space) for e in self.envs]
            return "ok", (spaces, getattr(first, "spec", None), first.metadata,
                          getattr(first, "render_mode", None), os.getpid())
        except Exception as exc:
            self.close()
            return "err", current, "make", repr(exc), traceback.format_exc()

    def _slots(self, slots: list[int] | None) -> list[int]:
        return list(range(len(self.envs))) if slots is None else slots

    def _obs(self, slots: list[int], obs: list[Any]) -> Any:
        # one stacked array per actor: one object to serialise instead of one per env
        if not self._box_obs:
            return obs
        try:
            out = np.array(obs)
        except ValueError:  # ragged: some env's shape is off
            out = None
        if out is None or out.shape[1:] != self._obs_shape:  # off the usual path from here
            ids = [self.env_ids[s] for s in slots]  # the envs by their own ids
            problem = observation_mismatch(self.envs[0].observation_space, obs, ids)
            if problem is not None:
                raise ObservationMismatch(problem)
            if out is None:
                out = np.array(obs)  # raises numpy's own error: not a shape problem
        return out

    def step(self, slots: list[int] | None, actions: Any) -> Reply:
        """Step the envs ``slots`` with ``actions[k]`` for ``slots[k]``."""
        slots = self._slots(slots)
        current = -1
        if self._int_actions and isinstance(actions, np.ndarray):
            actions = actions.tolist()  # plain ints: Discrete.contains checks them fastest
        try:
            obs_l, rew_l, term_l, trunc_l, info_l = [], [], [], [], []
            unchecked = self._unchecked
            for k, s in enumerate(slots):
                current = self.env_ids[s]
                obs, rew, term, trunc, info = self.envs[s].step(actions[k])
                if unchecked and s in unchecked:
                    problem = step_value_problem(current, rew, term, trunc)
                    if problem is not None:
                        raise ObservationMismatch(problem)
                    unchecked.discard(s)
                obs_l.append(obs)
                rew_l.append(float(rew))
                term_l.append(bool(term))
                trunc_l.append(bool(trunc))
                info_l.append(info)
            return "ok", (self._obs(slots, obs_l), rew_l, term_l, trunc_l, info_l)
        except ObservationMismatch as exc:  # the env's fault, said in one line
            return "err", current, "step", str(exc), ""
        except Exception as exc:
            return "err", current, "step", repr(exc), traceback.format_exc()

    def reset(
        self, slots: list[int] | None, seeds: list[int | None], options: dict[str, Any] | None
    ) -> Reply:
        """Reset the envs ``slots``, env ``slots[k]`` with ``seeds[k]``."""
        slots = self._slots(slots)
        current = -1
        try:
            obs_l, info_l = [], []
            for k, s in enumerate(slots):
                current = self.env_ids[s]
                obs, info = self.envs[s].reset(seed=seeds[k], options=options)
                obs_l.append(obs)
                info_l.append(info)
            return "ok", (self._obs(slots, obs_l), info_l)
        except ObservationMismatch as exc:  # the env's fault, said in one line
            return "err", current, "reset", str(exc), ""
        except Exception as exc:
            return "err", current, "reset", repr(exc), traceback.format_exc()

    def call(self, command: str, slots: list[int] | None, *args: Any) -> Reply:
        """``render``, ``get_attr`` (name), ``set_attr`` (name, value), ``snapshot`` or
        ``restore`` (one snapshot per slot) on the envs ``slots``."""
        slots = self._slots(slots)
        current = -1
        try:
            out = []
            for k, s in enumerate(slots):
                current = self.env_ids[s]
                env = self.envs[s]
                if command == "render":
                    out.append(env.render())
                elif command == "get_attr":
                    out.append(env.get_wrapper_attr(args[0]))
                elif command == "set_attr":
                    env.set_wrapper_attr(args[0], args[1])
                elif command == "snapshot":
                    out.append(env_state.snapshot_or_reason(env))
                elif command == "restore":
                    env_state.restore(env, args[0][k])
                else:
                    raise ValueError(f"unknown env actor command {command!r}")
            return "ok", (None if command in {"set_attr", "restore"} else out)
        except Exception as exc:
            return "err", current, command, repr(exc), traceback.format_exc()

    def pid(self) -> int:
        """The actor's process id (for monitoring and tests)."""
        return os.getpid()

    def close(self) -> Reply:
        """Close every env; the caller kills the actor afterwards."""
        for env in self.envs:
            with contextlib.suppress(Exception):
                env.close()
        self.envs = []
        return "ok", None
