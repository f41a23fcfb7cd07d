"""The in-process vector env: a loop over gymnasium envs with stacked results and no autoreset."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array

from rlblocks.collect import (
    VectorEnvBase,
    as_env_ids,
    has_object_leaves,
    observation_mismatch,
    observation_value_problem,
    stack_observations,
    step_value_problem,
)
from rlblocks.collect import env_state as env_state
from rlblocks.contracts import EnvWorkerError, RlblocksError
from rlblocks_env_dummy._watchdog import WATCHDOG, EnvHung, call_sites, enable_faulthandler

#: What every use of a closed vector env raises (the process backends say the same).
_CLOSED = "this vector env is closed; build a new one"


class DummyVectorEnv(VectorEnvBase):
    """Steps ``len(env_fns)`` envs one after the other in this process.

    Finished envs are not reset automatically: the caller resets them with ``reset(env_ids)``,
    so a returned transition never spans two episodes. Observations come back stacked as a fresh
    array (or nested dict/tuple of arrays) of shape ``[len(env_ids), *obs_shape]``; leaves that
    are not fixed-shape arrays (``Text``...) as 1-D object arrays, like the process backends.
    An env that raises, and every use after ``close()``, is an EnvWorkerError naming the env,
    as in the process backends; an env that raised in ``step`` must be reset again, with every
    other env of that step (their results never reached the caller).

    An env that takes longer than ``worker_timeout`` seconds in ``step`` or ``reset`` is
    interrupted by a watchdog thread: an EnvWorkerError naming it (None or ``inf``: no limit).
    One that crashes the process in native code is named in the Python stack that
    :mod:`faulthandler` prints. See :mod:`rlblocks_env_dummy._watchdog`.
    """

    def __init__(
        self, env_fns: Sequence[Callable[[], gym.Env]], worker_timeout: float | None = 120.0
    ) -> None:
        if len(env_fns) == 0:
            raise ValueError("DummyVectorEnv needs at least one env factory")
        if worker_timeout is not None and (
            isinstance(worker_timeout, bool) or not worker_timeout > 0
        ):
            raise ValueError(f"worker_timeout must be positive or None, got {worker_timeout!r}")
        self._closed = True  # until every env is made (close() then has nothing to do)
        self.envs: list[gym.Env] = []
        for i, fn in enumerate(env_fns):
            try:
                env = fn()
            except RlblocksError:
                self._close_made()
                raise
            except Exception as exc:
                self._close_made()
                raise EnvWorkerError(f"env {i} raised while being made: {exc!r}") from exc
            if not (callable(getattr(env, "step", None)) and callable(getattr(env, "reset", None))
                    and isinstance(getattr(env, "observation_space", None), gym.Space)
                    and isinstance(getattr(env, "action_space", None), gym.Space)):  # fmt: skip
                self._close_made()
                raise EnvWorkerError(
                    f"env {i}'s factory returned {type(env).__name__}, not a gymnasium env with "
                    "an observation_space and an action_space; return the env it makes"
                )
            self.envs.append(env)
        self.num_envs = len(self.envs)
        # env i is stepped through functions that name it in a crash's stack
        self._steps, self._resets = (
            list(fns) for fns in zip(*(call_sites(i, env) for i, env in enumerate(self.envs)))
        )
        enable_faulthandler()
        # what step/reset is doing, for the watchdog: (command, env ids, results so far,
        # thread id) while it runs, None between calls
        self._busy: tuple[str, list[int], list[Any], int] | None = None
        self._watch_state: list[Any] | None = None  # the watchdog's own notes
        self._hung: list[Any] | None = None  # [busy, message, delivered] once it fired
        self._worker_timeout = (
            None if worker_timeout is None or math.isinf(worker_timeout) else float(worker_timeout)
        )
        self.observation_space: gym.Space = self.envs[0].observation_space
        self.action_space: gym.Space = self.envs[0].action_space
        for i, env in enumerate(self.envs[1:], start=1):
            if env.observation_space != self.observation_space:
                raise ValueError(
                    f"env {i} has observation space {env.observation_space}, env 0 has "
                    f"{self.observation_space}; every env of a vector env must share its spaces"
                )
        self._box_obs = isinstance(self.observation_space, gym.spaces.Box)
        self._object_obs = has_object_leaves(self.observation_space)
        self._obs_shape = self.observation_space.shape
        self._obs_dtype = self.observation_space.dtype
        self._all_ids = np.arange(self.num_envs)
        self._all_list = self._all_ids.tolist()
        # envs whose episode ended (or that were never reset): a set, so that the usual step,
        # with none waiting, checks it in one truth test
        self._waiting: set[int] = set(self._all_list)
        # envs whose step() results have not been checked yet (step_value_problem): a set, so
        # that the usual step, with none left, checks it in one truth test
        self._unchecked: set[int] = set(self._all_list)
        self._closed = False
        self.spec = getattr(self.envs[0], "spec", None)
        self.metadata: dict[str, Any] = getattr(self.envs[0], "metadata", {})
        self.render_mode: str | None = getattr(self.envs[0], "render_mode", None)
        if self._worker_timeout is not None:
            WATCHDOG.watch(self)

    def _hang_message(self, busy: tuple[str, list[int], list[Any], int]) -> str:
        """What a call hung in ``busy`` raises: the env and the way out."""
        command, ids, done, _ = busy
        index = ids[min(len(done), len(ids) - 1)]
        name = getattr(self.spec, "id", None)
        return (
            f"env {index}{f' ({name})' if name else ''} did not finish {command} within "
            f"worker_timeout={self._worker_timeout}s; it runs in this process (backend "
            "'dummy'), where a hung env cannot be stopped cleanly: step envs in worker "
            "processes (env.backend=subproc), or raise env.worker_timeout (None: no limit)"
        )

    def _hung_error(self, busy: tuple[str, list[int], list[Any], int], exc: EnvHung) -> str:
        hung = self._hung
        return hung[1] if hung is not None and hung[0] is busy else str(exc)

    # -- stacking -----------------------------------------------------------------------------
    def _stack(self, items: Sequence[Any], ids: Sequence[int], command: str) -> Any:
        if self._box_obs:  # np.array builds [n, *shape] like np.stack, at a third of the cost
            try:
                out = np.array(items, dtype=self._obs_dtype)
            except (ValueError, TypeError, OverflowError):  # ragged, or not numbers
                out = None
            if out is None or out.shape[1:] != self._obs_shape:
                self._misshapen(items, ids, command)
                self._unfit(items, ids, command)
            return out
        try:
            if self._object_obs:
                return stack_observations(self.observation_space, items)
            out = create_empty_array(self.observation_space, n=len(items), fn=np.empty)
            return concatenate(self.observation_space, items, out)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            self._misshapen(items, ids, command, exc)
            self._unfit(items, ids, command, exc)
            raise

    def _unfit(
        self, items: Sequence[Any], ids: Sequence[int], command: str,
        cause: BaseException | None = None,
    ) -> None:
        """Raise EnvWorkerError naming the env whose observation has the right shape but values
        that do not fit its space (called once :meth:`_misshapen` found no shape to blame)."""
        if command == "step":
            self._waiting.update(ids)
        name = getattr(self.spec, "id", None) or "the env"
        problem = observation_value_problem(self.observation_space, items, ids)
        raise EnvWorkerError(f"{name} ({command}): {problem}") from cause

    def _misshapen(
        self, items: Sequence[Any], ids: Sequence[int], command: str,
        cause: BaseException | None = None,
    ) -> None:
        """Raise EnvWorkerError naming the env and the observation leaf whose shape is not the
        one its space says (in the words of the process backends); returns when none is."""
        problem = observation_mismatch(self.observation_space, items, ids)
        if problem is None:
            return
        if command == "step":  # they stepped, but the caller never sees where to
            self._waiting.update(ids)
        name = getattr(self.spec, "id", None) or "the env"
        raise EnvWorkerError(f"{name} ({command}): {problem}") from cause

    def _check_open(self) -> None:
        if self._closed:
            raise EnvWorkerError(_CLOSED)

    def _ids(self, env_ids: Sequence[int] | np.ndarray | None) -> np.ndarray:
        self._check_open()
        if env_ids is None:
            return self._all_ids
        return as_env_ids(env_ids, self.num_envs)

    # -- protocol -----------------------------------------------------------------------------
    def reset(
        self,
        env_ids: Sequence[int] | np.ndarray | None = None,
        seed: int | Sequence[int] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, list[dict]]:
        """Reset the given envs; an int ``seed`` seeds env ``i`` with ``seed + i``."""
        ids = self._ids(env_ids)
        id_list = self._all_list if ids is self._all_ids else ids.tolist()
        if seed is None:
            seeds: Sequence[int | None] = [None] * len(id_list)
        elif isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in id_list]
        else:
            seeds = list(seed)
            if len(seeds) != len(id_list):
                raise ValueError(f"got {len(seeds)} seeds for {len(id_list)} envs")
        obs_list: list[Any] = []
        infos = []
        resets = self._resets
        self._busy = busy = ("reset", id_list, obs_list, threading.get_ident())
        try:
            for i, s in zip(id_list, seeds):
                try:
                    obs, info = resets[i](s, options)
                except Exception as exc:
                    raise EnvWorkerError(f"env {i} raised in reset: {exc!r}") from exc
                obs_list.append(obs)
                infos.append(info)
        except EnvHung as exc:
            raise EnvWorkerError(self._hung_error(busy, exc)) from None
        finally:
            self._busy = None
        stacked = self._stack(obs_list, id_list, "reset")
        self._waiting.difference_update(id_list)
        return stacked, infos

    def step(
        self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Step the given envs with ``actions[j]`` for ``env_ids[j]``; no autoreset."""
        if env_ids is None:  # the collector's usual call: no id checks, no gathers
            id_list = self._all_list
            stepping = self._steps
        else:
            id_list = self._ids(env_ids).tolist()
            stepping = [self._steps[i] for i in id_list]
        n = len(id_list)
        if len(actions) != n:
            raise ValueError(f"got {len(actions)} actions for {n} envs")
        waiting = self._waiting
        if waiting and not waiting.isdisjoint(id_list):
            # close() puts every env here, so a closed env costs the usual step nothing
            self._check_open()
            bad = [i for i in id_list if i in waiting]
            raise EnvWorkerError(
                f"envs {bad} finished their episode or were never reset; call reset(env_ids) first"
            )
        # numpy integer actions stay numpy scalars: gymnasium 1.x's Discrete.contains checks
        # them faster than Python ints (which it range-checks through np.iinfo)
        results: list[tuple] = []
        append = results.append
        # one store before and one after: all the watchdog needs (no per-env cost)
        self._busy = busy = ("step", id_list, results, threading.get_ident())
        try:
            for step, a in zip(stepping, actions):
                append(step(a))
        except EnvHung as exc:
            waiting.update(id_list)
            raise EnvWorkerError(self._hung_error(busy, exc)) from None
        except Exception as exc:
            bad_id = id_list[len(results)]
            # the envs stepped before it moved on unseen, it is in an unknown state: as in the
            # process backends, every env of this step must be reset before it steps again
            waiting.update(id_list)
            raise EnvWorkerError(f"env {bad_id} raised in step: {exc!r}") from exc
        finally:
            self._busy = None
        obs_list, rew_list, term_list, trunc_list, infos = zip(*results)
        if self._unchecked:
            self._check_values(id_list, rew_list, term_list, trunc_list)
        try:
            rew = np.array(rew_list, dtype=np.float64)
            terminated = np.array(term_list, dtype=bool)
            truncated = np.array(trunc_list, dtype=bool)
        except (TypeError, ValueError, OverflowError):
            # an env whose first steps were fine returned a value of the wrong type later
            self._refuse_values(id_list, rew_list, term_list, trunc_list)
        if rew.ndim + terminated.ndim + truncated.ndim != 3:  # e.g. one-element arrays
            self._refuse_values(id_list, rew_list, term_list, trunc_list)
        if any(term_list) or any(trunc_list):
            waiting.update(i for i, t, u in zip(id_list, term_list, trunc_list) if t or u)
        return self._stack(obs_list, id_list, "step"), rew, terminated, truncated, list(infos)

    def _check_values(
        self, id_list: Sequence[int], rews: Sequence[Any], terms: Sequence[Any],
        truncs: Sequence[Any],
    ) -> None:
        """Refuse (EnvWorkerError naming the env) a reward or flag of the wrong type from an
        env's first step; the envs of this step must then be reset, as after an env error."""
        unchecked = self._unchecked
        for i, r, te, tr in zip(id_list, rews, terms, truncs):
            if i not in unchecked:
                continue
            problem = step_value_problem(i, r, te, tr)
            if problem is not None:
                self._waiting.update(id_list)
                name = getattr(self.spec, "id", None) or "the env"
                raise EnvWorkerError(f"{name} (step): {problem}")
            unchecked.discard(i)

    def _refuse_values(
        self, id_list: Sequence[int], rews: Sequence[Any], terms: Sequence[Any],
        truncs: Sequence[Any],
    ) -> NoReturn:
        """The rewards or flags of this step do not stack into one number per env: raise an
        EnvWorkerError naming the env and the value (the envs of this step must be reset)."""
        self._waiting.update(id_list)
        name = getattr(self.spec, "id", None) or "the env"
        for i, r, te, tr in zip(id_list, rews, terms, truncs):
            problem = step_value_problem(i, r, te, tr)
            if problem is not None:
                raise EnvWorkerError(f"{name} (step): {problem}")
        raise EnvWorkerError(
            f"{name} (step): envs {list(id_list)} returned rewards or flags that do not fit one "
            "float64 reward and two bools per env (an integer beyond float64's range?); return "
            "a float reward and bool flags"
        )

    def _close_made(self) -> None:
        """Close the envs made so far (a later factory failed)."""
        for env in self.envs:
            with contextlib.suppress(Exception):
                env.close()

    def _call(self, command: str, env_ids: Any, call: Callable[[gym.Env], Any]) -> list[Any]:
        """``call(env)`` for each env of ``env_ids``; an env that raises is an EnvWorkerError
        naming it and the command, as the process backends report it."""
        out = []
        for i in self._ids(env_ids).tolist():
            try:
                out.append(call(self.envs[i]))
            except Exception as exc:
                raise EnvWorkerError(f"env {i} raised in {command}: {exc!r}") from exc
        return out

    def render(self, env_ids: Sequence[int] | np.ndarray | None = None) -> list[Any]:
        """Render the given envs (their ``render_mode`` decides what comes back)."""
        return self._call("render", env_ids, lambda env: env.render())

    def get_attr(self, name: str, env_ids: Sequence[int] | np.ndarray | None = None) -> list[Any]:
        """Read an attribute of each env (unwrapped through gymnasium's wrappers); a missing
        one is an EnvWorkerError naming the env, as in the process backends."""
        return self._call("get_attr", env_ids, lambda env: env.get_wrapper_attr(name))

    def set_attr(
        self, name: str, value: Any, env_ids: Sequence[int] | np.ndarray | None = None
    ) -> None:
        """Set an attribute on each env."""
        self._call("set_attr", env_ids, lambda env: env.set_wrapper_attr(name, value))

    def snapshot(self, env_ids: Sequence[int] | np.ndarray | None = None) -> list[dict[str, Any]]:
        """Each env's state as plain values (see :mod:`rlblocks.collect`): ``{"env":
        snapshot or None, "why": why not, "needs_reset": whether its episode ended}``."""
        out = []
        for i in self._ids(env_ids).tolist():
            entry = env_state.snapshot_or_reason(self.envs[i])
            entry["needs_reset"] = i in self._waiting
            out.append(entry)
        return out

    def restore(
        self,
        snapshots: Sequence[Mapping[str, Any]],
        env_ids: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Put each env back where :meth:`snapshot` found its twin (every entry must hold an
        ``"env"`` snapshot)."""
        ids = self._ids(env_ids).tolist()
        if len(snapshots) != len(ids):
            raise ValueError(f"got {len(snapshots)} snapshots for {len(ids)} envs")
        for i, entry in zip(ids, snapshots):
            if entry.get("env") is None:
                raise ValueError(f"no snapshot of env {i} to restore")
            env_state.restore(self.envs[i], entry["env"])
            if entry.get("needs_reset", False):
                self._waiting.add(i)
            else:
                self._waiting.discard(i)

    @property
    def batched_observation_space(self) -> gym.Space:
        """The space of a stacked observation of all envs."""
        return batch_space(self.observation_space, self.num_envs)

    def close(self) -> None:
        """Close every env; a second call does nothing, any other use raises EnvWorkerError."""
        if self._closed:
            return
        self._closed = True
        self._waiting.update(self._all_list)  # step() finds out without a check of its own
        WATCHDOG.unwatch(self)
        for env in self.envs:
            env.close()
